#!/usr/bin/env bash
# rota on a machine with a real NVIDIA GPU (CI has none; run this where one is
# lent). Checks, each printed as ok/FAIL:
#   1. agent/nvml.h's mirrored NVML structs against the real nvml.h;
#   2. discovery through NVML (`rota agent --probe`): model, memory, UUID, MIG mode, XID events;
#   3. `rota up` with real GPU tasks: CUDA sees exactly the task's GPU by UUID; telemetry shows
#      its load and memory; a higher-priority job preempts it, its SIGTERM handler writes a
#      checkpoint from the GPU process, and the restart resumes from it; an idle job holding the
#      GPU is flagged idle and over-provisioned; an impossible request is refused.
#   4. accounting: a 60 s matmul's energy (the GPU's counter, and rota's usage record) within 2%
#      of its power sampled at 10 Hz and integrated; GPM metrics present (Hopper and later) or
#      reported absent with the reason; a PyTorch loop whose data loader saturates its one CPU
#      flagged input-bound, and the same loop with GPU-resident data not.
#   5. services: a replica growing its GPU memory by 10 GiB every 2 s is seen by the server
#      within 1.5 s of each step, and a GPU-memory autoscale target fires.
#   Read-only: no power limits, clocks or MIG mode are changed.
# Usage: scripts/gpu-check.sh [ROTA_BINARY]   (results also in $OUT or /tmp/gpu-check)
set -u
ROTA=$(realpath "${1:-build/src/cli/rota}")
RESULTS=${OUT:-/tmp/gpu-check}
mkdir -p "$RESULTS"
fails=0
check() {  # check NAME COMMAND...
  local name=$1; shift
  if "$@" >/dev/null 2>&1; then echo "ok   $name"; else echo "FAIL $name"; fails=$((fails + 1)); fi
}
step() { echo; echo "== $* ($(date +%T))"; }
get() {  # get URL [TOKEN]: the body, or nothing (python rather than curl, which a GPU image may lack)
  python3 -c "
import sys, urllib.request
r = urllib.request.Request(sys.argv[1], headers={'Authorization': 'Bearer ' + sys.argv[2]} if len(sys.argv) > 2 else {})
sys.stdout.write(urllib.request.urlopen(r, timeout=5).read().decode())" "$@" 2>/dev/null
}

step nvidia-smi
nvidia-smi --query-gpu=index,name,uuid,memory.total,mig.mode.current,driver_version --format=csv
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)

step "NVML ABI (agent/nvml.h against nvml.h)"
hdr=$(ls /usr/local/cuda/include/nvml.h 2>/dev/null || find / -name nvml.h -path '*include*' 2>/dev/null | head -1)
if [ -n "$hdr" ] && g++ -std=c++20 -Isrc -I"$(dirname "$hdr")" scripts/nvml_abi_check.cc -o /tmp/nvml_abi_check; then
  /tmp/nvml_abi_check; check "NVML structs and constants match nvml.h" test $? = 0
else
  echo "FAIL no nvml.h or no C++ compiler"; fails=$((fails + 1))
fi

step "rota agent --probe"
"$ROTA" agent --probe | tee "$RESULTS/probe.txt"
check "probe discovers the GPU through NVML" grep -q '^source *nvml' "$RESULTS/probe.txt"
check "probe reports the GPU's UUID" grep -q "$uuid" "$RESULTS/probe.txt"

step "MIG profiles the driver offers (pynvml; compared with core/mig.cc by eye)"
python3 - <<'EOF' 2>&1 | tee "$RESULTS/mig-profiles.txt"
import ctypes
import pynvml as n
n.nvmlInit()
d = n.nvmlDeviceGetHandleByIndex(0)
print("mig mode", n.nvmlDeviceGetMigMode(d))
for p in range(16):
    try:
        i = n.nvmlDeviceGetGpuInstanceProfileInfoV(d, p)
        print(p, i.name, "id", i.id, "slices", i.sliceCount, "mem", i.memorySizeMB, "max", i.instanceCount, flush=True)
        cnt = ctypes.c_uint(0)
        n.nvmlDeviceGetGpuInstancePossiblePlacements(d, i.id, None, ctypes.byref(cnt))
        arr = (n.c_nvmlGpuInstancePlacement_t * max(cnt.value, 1))()
        n.nvmlDeviceGetGpuInstancePossiblePlacements(d, i.id, arr, ctypes.byref(cnt))
        print("   starts", [(arr[k].start, arr[k].size) for k in range(cnt.value)])
    except Exception as e:
        print(p, "-", e)
EOF

step "rota up with real GPU tasks"
D=$(mktemp -d)
export ROTA_SERVER=http://127.0.0.1:7171 ROTA_DATA_DIR=$D/data
"$ROTA" up --data-dir "$D/data" --listen 127.0.0.1:7171 --min-runtime 5s --idle-after 15s >"$D/up.log" 2>&1 &
UP=$!
trap 'kill $UP 2>/dev/null; wait $UP 2>/dev/null' EXIT
for _ in $(seq 100); do get $ROTA_SERVER/healthz >/dev/null && break; sleep 0.1; done
for _ in $(seq 100); do "$ROTA" nodes 2>/dev/null | grep -q H200 && break; sleep 0.1; done
"$ROTA" nodes

# A training loop: prints what CUDA sees, holds 24 GiB, multiplies bf16 matrices; on
# SIGTERM it saves a checkpoint and reports it to rota; a restart resumes from it.
cat >"$D/train.py" <<'EOF'
import os, signal, sys, time, torch
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
resume = os.environ.get("ROTA_LAST_CHECKPOINT", "")
steps = torch.load(resume)["steps"] if resume else 0
print("visible", os.environ["CUDA_VISIBLE_DEVICES"], "count", torch.cuda.device_count(),
      "name", torch.cuda.get_device_name(0), "resume", resume or "-", "from step", steps, flush=True)
hold = torch.empty(24 << 30, dtype=torch.uint8, device="cuda")
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
t0 = time.time()
limit = 10 if resume else float(sys.argv[1])
while not stop and time.time() - t0 < limit:
    b = a @ a
    torch.cuda.synchronize()
    steps += 1
ck = os.environ["ROTA_CHECKPOINT_FILE"]
path = os.path.join(os.path.dirname(ck), "step-%d.pt" % steps)
torch.save({"steps": steps}, path)
open(ck, "w").write(path)
print("stopped" if stop else "done", "at step", steps, "checkpoint", path, flush=True)
EOF
cat >"$D/train.yaml" <<EOF
name: train
priority: low
tasks: [{name: worker, gpus: 1, command: [python3, $D/train.py, "60"]}]
checkpoint: {signal: SIGTERM, grace: 60s}
EOF
cat >"$D/notebook.yaml" <<EOF
name: notebook
priority: high
tasks: [{name: main, gpus: 1, command: [python3, -c, "import torch, time; torch.zeros(1, device='cuda'); time.sleep(30)"]}]
EOF
cat >"$D/too-big.yaml" <<EOF
name: too-big
tasks: [{name: worker, gpus: 2, command: ["true"]}]
EOF
"$ROTA" submit "$D/train.yaml"
for _ in $(seq 300); do "$ROTA" logs 1 2>/dev/null | grep -q visible && break; sleep 0.1; done
sleep 12
"$ROTA" describe 1 -o json >"$RESULTS/train-running.json"
"$ROTA" describe 1
"$ROTA" top | tee "$RESULTS/top.txt"
get $ROTA_SERVER/v1/nodes "$(cat $D/data/admin.token)" >"$RESULTS/nodes.json"
get $ROTA_SERVER/metrics "$(cat $D/data/admin.token)" | grep '^rota_gpu_' | tee "$RESULTS/metrics.txt"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
check "the task saw exactly its GPU, by UUID" grep -q "visible $uuid count 1" <("$ROTA" logs 1)
gpu0() {  # a field of GPU 0 in /v1/nodes; memory in MiB
  python3 -c "
import json; g = json.load(open('$RESULTS/nodes.json'))['nodes'][0]['gpu_list'][0]; v = g['$1']
if isinstance(v, str): v = float(v[:-2]) * {'Mi': 1, 'Gi': 1024, 'Ti': 1 << 20}[v[-2:]]
print(int(v))"
}
echo "GPU 0: utilisation $(gpu0 utilization_pct)%, memory used $(gpu0 memory_used) MiB"
check "telemetry: the GPU busy (utilisation >= 50%)" test "$(gpu0 utilization_pct)" -ge 50
check "telemetry: the task's 24 GiB in GPU memory" test "$(gpu0 memory_used)" -ge 24576
check "telemetry: real, not simulated" grep -q '"simulated": false' "$RESULTS/nodes.json"

step "preemption by a higher-priority job"
"$ROTA" submit "$D/notebook.yaml"
for _ in $(seq 600); do "$ROTA" logs 1 2>/dev/null | grep -q '^stopped' && break; sleep 0.1; done
for _ in $(seq 300); do "$ROTA" describe 2 2>/dev/null | grep -qi 'running' && break; sleep 0.1; done
"$ROTA" logs 1
"$ROTA" describe 1
check "the preempted task wrote its checkpoint on SIGTERM" grep -q '^stopped at step' <("$ROTA" logs 1)
check "rota recorded the checkpoint" grep -q 'step-.*\.pt' <("$ROTA" describe 1)

step "right-sizing: an idle job that holds the GPU"
sleep 18
"$ROTA" describe 2 | tee "$RESULTS/notebook.txt"
check "flagged idle" grep -q 'idle:' "$RESULTS/notebook.txt"
check "flagged over-provisioned" grep -q 'over-provisioned' "$RESULTS/notebook.txt"
get $ROTA_SERVER/metrics "$(cat $D/data/admin.token)" | grep -E '^rota_job_(idle|overprovisioned)'

step "an impossible request"
"$ROTA" submit "$D/too-big.yaml" 2>&1 | tee "$RESULTS/too-big.txt"
check "a 2-GPU request on the 1-GPU node is refused with the reason" grep -q 'largest matching node has 1' "$RESULTS/too-big.txt"

step "GPU fractions: two half-GPU jobs share the GPU"
cat >"$D/half.yaml" <<EOF
name: half
tasks: [{name: w, gpu: {fraction: 0.5, memory: 16Gi}, command: [python3, -c, "import os, time, torch; x = torch.empty(8 << 30, dtype=torch.uint8, device='cuda'); t = time.time(); print('share', os.environ['ROTA_GPU_FRACTION'], 'limit', os.environ['ROTA_GPU_MEMORY_LIMIT_MIB'], 'visible', os.environ['CUDA_VISIBLE_DEVICES'], 'count', torch.cuda.device_count(), flush=True); time.sleep(8); print('span', t, time.time(), flush=True)"]}]
EOF
ids=$("$ROTA" submit --count 2 "$D/half.yaml" | grep -o '[0-9]*\.\.[0-9]*')  # "submitted 2 jobs (ids 3..4)"
halves=$(seq "${ids%..*}" "${ids#*..}" | tr '\n' ' ')
echo "jobs $halves"
for _ in $(seq 900); do
  [ "$(for j in $halves; do "$ROTA" logs $j 2>/dev/null; done | grep -c '^share')" = 2 ] && break; sleep 0.1
done
"$ROTA" top
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
for j in $halves; do "$ROTA" logs $j; "$ROTA" describe $j | sed -n '/Placement/,/^$/p'; done
for _ in $(seq 300); do
  [ "$(for j in $halves; do "$ROTA" logs $j 2>/dev/null; done | grep -c '^span')" = 2 ] && break; sleep 0.1
done
check "both halves ran on the one GPU, by UUID" \
  test "$(for j in $halves; do "$ROTA" logs $j; done | grep -c "visible $uuid count 1")" = 2
check "the halves ran at the same time" python3 -c "
import sys; s = [tuple(map(float, l.split()[1:])) for l in sys.stdin if l.startswith('span')]
sys.exit(not (len(s) == 2 and max(a for a, _ in s) < min(b for _, b in s)))" < <(for j in $halves; do "$ROTA" logs $j; done)

step "the preempted job resumes from its checkpoint"
for _ in $(seq 900); do "$ROTA" logs 1 2>/dev/null | grep -q '^done' && break; sleep 0.1; done
"$ROTA" logs 1
check "the restart resumed from the checkpoint" grep -q 'resume .*step-' <("$ROTA" logs 1)
"$ROTA" jobs --all

step "accounting: a 60 s matmul's energy against its power sampled at 10 Hz"
# Once the GPU is free: power (10 Hz) and the energy counter through pynvml
# for as long as the job runs, integrated over the job's own start and end.
for _ in $(seq 600); do "$ROTA" jobs 2>/dev/null | grep -q running || break; sleep 0.5; done
cat >"$D/matmul.py" <<'PY'
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    b = a @ a
    torch.cuda.synchronize()
print("done", flush=True)
PY
cat >"$D/power.py" <<'PY'
import sys, time, pynvml as n
n.nvmlInit()
d = n.nvmlDeviceGetHandleByIndex(0)
with open(sys.argv[1], "w") as out:
    while True:
        out.write("%.3f %d %d\n" % (time.time(), n.nvmlDeviceGetPowerUsage(d), n.nvmlDeviceGetTotalEnergyConsumption(d)))
        out.flush()
        time.sleep(0.1)
PY
python3 "$D/power.py" "$RESULTS/power.txt" &
SAMPLER=$!
cat >"$D/mm.yaml" <<YAML
name: matmul
tasks: [{name: w, gpus: 1, command: [python3, $D/matmul.py, "60"]}]
YAML
mm=$("$ROTA" submit "$D/mm.yaml" | grep -o 'job [0-9]*' | grep -o '[0-9]*')
for _ in $(seq 1800); do "$ROTA" describe "$mm" 2>/dev/null | grep -qiE 'succeeded|failed' && break; sleep 0.1; done
sleep 3
kill $SAMPLER 2>/dev/null
for _ in $(seq 100); do
  "$ROTA" report job "$mm" -o json >"$RESULTS/matmul-usage.json" 2>/dev/null && grep -q energy_j "$RESULTS/matmul-usage.json" && break
  sleep 0.2
done
"$ROTA" report job "$mm"
python3 - "$RESULTS/power.txt" "$RESULTS/matmul-usage.json" <<'PY' | tee "$RESULTS/energy.txt"
import json, sys, datetime
rows = [tuple(map(float, l.split())) for l in open(sys.argv[1]) if len(l.split()) == 3]
a = json.load(open(sys.argv[2]))["attempts"][0]
def ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
start, end = ts(a["started_at"]), ts(a["ended_at"])
w = [r for r in rows if start <= r[0] <= end]
integrated = sum((w[i + 1][0] - w[i][0]) * (w[i][1] + w[i + 1][1]) / 2000.0 for i in range(len(w) - 1))  # mW x s -> J
counter = (w[-1][2] - w[0][2]) / 1000.0
print("samples %d over %.1f s; integrated power %.0f J; counter %.0f J (%.2f%%); record %d J (%.2f%%)" % (
    len(w), w[-1][0] - w[0][0], integrated, counter, 100 * (counter / integrated - 1), a["energy_j"],
    100 * (a["energy_j"] / integrated - 1)))
PY
within() {  # within LABEL: the percentage after LABEL in energy.txt is within 2
  python3 -c "
import re, sys; m = re.search(r'$1 [0-9]+ J \(([-0-9.]+)%\)', open('$RESULTS/energy.txt').read())
sys.exit(not m or abs(float(m.group(1))) > 2)"
}
check "the GPU's energy counter within 2% of its integrated power" within counter
check "rota's usage record within 2% of the integrated power" within record

step "accounting: GPM metrics, present or reported absent"
"$ROTA" agent --probe >"$RESULTS/probe-gpm.txt" 2>&1
grep -A2 '^gpm' "$RESULTS/probe-gpm.txt"
check "the probe says whether GPM is there, and why not" grep -qE '^gpm +(on [0-9]+ of|absent: )' "$RESULTS/probe-gpm.txt"
if grep -qE '^gpm +on ' "$RESULTS/probe-gpm.txt"; then
  check "GPM metrics on /metrics" grep -q '^DCGM_FI_PROF_SM_ACTIVE{' <(get $ROTA_SERVER/metrics "$(cat $D/data/admin.token)")
fi

step "accounting: a loop whose data loader saturates its one CPU, and the same loop fed on the GPU"
cat >"$D/loader.py" <<'PY'
import sys, time, torch
torch.set_num_threads(1)
gpu_data = sys.argv[1] == "gpu"
w = torch.randn(4096, 4096, device="cuda")
end = time.time() + 100
while time.time() < end:
    if gpu_data:  # GPU-resident data
        x = torch.randn(4096, 4096, device="cuda")
        for _ in range(20):
            x = torch.tanh(x @ w)
    else:  # a slow CPU data loader
        x = torch.randn(256, 4096)
        for _ in range(30):
            x = torch.tanh(x * 1.0001 + 0.5)
        x = x.cuda() @ w
    torch.cuda.synchronize()
PY
for kind in cpu gpu; do
  cat >"$D/loader-$kind.yaml" <<YAML
name: loader-$kind
tasks: [{name: w, gpus: 1, cpu: 1, command: [python3, $D/loader.py, $kind]}]
YAML
  id=$("$ROTA" submit "$D/loader-$kind.yaml" | grep -o 'job [0-9]*' | grep -o '[0-9]*')
  for _ in $(seq 600); do "$ROTA" describe "$id" 2>/dev/null | grep -qi running && break; sleep 0.1; done
  sleep 80
  "$ROTA" describe "$id" >"$RESULTS/loader-$kind.txt"
  grep -iE 'input-bound|activity' "$RESULTS/loader-$kind.txt" || true
  get $ROTA_SERVER/metrics "$(cat $D/data/admin.token)" | grep "^rota_job_input_bound{job=\"$id\"" | tee -a "$RESULTS/loader-$kind.txt"
  "$ROTA" cancel "$id" >/dev/null
  for _ in $(seq 300); do "$ROTA" describe "$id" 2>/dev/null | grep -qi running || break; sleep 0.1; done
done
check "the CPU-starved loop is flagged input-bound" grep -q 'input-bound:' "$RESULTS/loader-cpu.txt"
check "the GPU-fed loop is not" bash -c "! grep -q 'input-bound:' '$RESULTS/loader-gpu.txt'"
step "services: GPU memory seen within 1.5 s of each step, and a memory target fires"
# A service replica that answers HTTP and grows its GPU memory by 10 GiB every
# 2 s (to 60 GiB), logging when each step is allocated; the server's view of
# the GPU's memory is sampled every 100 ms meanwhile. Target: 25% of the GPU's
# memory per replica, so the autoscaler asks for a second replica once the
# steps pass it (it cannot be placed on a one-GPU machine: the decision is
# what is checked).
cat >"$D/grow.py" <<'PY'
import http.server, os, sys, threading, time, torch
log = open(sys.argv[1], "a")
def grow():
    torch.zeros(1, device="cuda")  # the CUDA context first
    time.sleep(4)
    held = []
    for step in range(1, 7):
        held.append(torch.empty(10 << 30, dtype=torch.uint8, device="cuda"))
        torch.cuda.synchronize()
        log.write("%d %.3f\n" % (step, time.time()))
        log.flush()
        time.sleep(2)
    time.sleep(600)
threading.Thread(target=grow, daemon=True).start()
class Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", int(os.environ["PORT"])), Ok).serve_forever()
PY
cat >"$D/grow.yaml" <<YAML
name: grow
kind: service
service:
  port: 18000
  replicas: {min: 1, max: 2}
  readiness: {path: /, period: 500ms}
  autoscale: {target_gpu_memory: 0.25, stable_window: 4s, panic_window: 2s}
tasks: [{name: server, gpus: 1, command: [python3, $D/grow.py, $RESULTS/grow-steps.txt]}]
YAML
: >"$RESULTS/grow-steps.txt"
grow=$("$ROTA" submit "$D/grow.yaml" | grep -o 'job [0-9]*' | grep -o '[0-9]*')
python3 - "$ROTA_SERVER" "$(cat $D/data/admin.token)" "$RESULTS/grow-seen.txt" <<'PY'
import json, sys, time, urllib.request
url, token, out = sys.argv[1], sys.argv[2], sys.argv[3]
def get(path):
    r = urllib.request.Request(url + path, headers={"Authorization": "Bearer " + token})
    return json.loads(urllib.request.urlopen(r, timeout=5).read())
def mib(v):
    return float(v[:-2]) * {"Mi": 1, "Gi": 1024, "Ti": 1 << 20}[v[-2:]] if isinstance(v, str) else float(v)
with open(out, "w") as f:
    end = time.time() + 40
    while time.time() < end:
        try:
            g = get("/v1/nodes")["nodes"][0]["gpu_list"][0]
            f.write("%.3f %d\n" % (time.time(), mib(g["memory_used"])))
            f.flush()
        except Exception as e:
            f.write("# %s\n" % e)
        time.sleep(0.1)
PY
get $ROTA_SERVER/v1/services "$(cat $D/data/admin.token)" >"$RESULTS/grow-service.json"
python3 - "$RESULTS/grow-steps.txt" "$RESULTS/grow-seen.txt" <<'PY' | tee "$RESULTS/grow-lag.txt"
import sys
steps = [tuple(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
seen = [tuple(map(float, l.split())) for l in open(sys.argv[2]) if l.strip() and not l.startswith("#")]
lags = []
for k, at in steps:
    # The first sample at or after the step showing its k x 10 GiB.
    hit = next((t for t, used in seen if t >= at - 0.05 and used >= k * 10240), None)
    lags.append(None if hit is None else hit - at)
    print("step %d (%d GiB) at %.3f: seen %s" % (k, 10 * k, at, "never" if hit is None else "after %.2f s" % (hit - at)))
ok = len(lags) == 6 and all(l is not None and l <= 1.5 for l in lags)
worst = max((l for l in lags if l is not None), default=-1)
print("max lag %.2f s over %d steps: %s" % (worst, len(lags), "ok" if ok else "FAIL"))
PY
check "the server saw each 10 GiB step within 1.5 s" grep -q ': ok$' "$RESULTS/grow-lag.txt"
check "the GPU-memory target fired (desired 2, on GPU memory)" python3 -c "
import json, sys
s = [x for x in json.load(open('$RESULTS/grow-service.json'))['services'] if x['name'] == 'grow'][0]
sys.exit(not (s['replicas']['desired'] == 2 and 'GPU memory' in s['last_scale']['reason']))"
[ -n "$grow" ] && "$ROTA" cancel "$grow" >/dev/null 2>&1

cp "$D/up.log" "$RESULTS/up.log"
echo
echo "$fails checks failed"
exit $((fails > 0))
