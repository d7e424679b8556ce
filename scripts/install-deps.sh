#!/usr/bin/env bash
# Installs the Debian 12 packages rota builds with, skipping those present.
# Runs apt-get update once, and only when something is missing. (prometheus brings
# promtool, which the metrics test uses to check the /metrics output; chromium and
# chromium-driver run the dashboard's browser test; runc and crun are the agent's OCI
# runtimes, busybox-static gives the container test a root filesystem, postgresql
# with libpq-dev is the PostgreSQL store, whose tests start their own server, and
# libjemalloc-dev is the rota binary's allocator.)
set -euo pipefail

packages=(g++ cmake ninja-build pkg-config libyaml-cpp-dev nlohmann-json3-dev libgtest-dev libbenchmark-dev
          libsqlite3-dev zlib1g-dev libssl-dev libboost-dev libcpp-httplib-dev prometheus openssl chromium chromium-driver
          runc crun busybox-static postgresql libpq-dev libjemalloc-dev)

missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
