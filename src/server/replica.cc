#include "server/replica.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace rota::server {
namespace {

using Steady = std::chrono::steady_clock;

Duration Since(Steady::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Steady::now() - t).count();
}

}  // namespace

std::string Replica::leader() const {
  std::lock_guard<std::mutex> lock(mu_);
  return leader_;
}

std::vector<ReplicaRow> Replica::replicas() const {
  std::lock_guard<std::mutex> lock(mu_);
  return replicas_;
}

void Replica::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

bool Replica::stopping() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stopping_;
}

bool Replica::SleepFor(Duration d) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::microseconds(d), [this] { return stopping_; });
  return !stopping_;
}

void Replica::Refresh(const std::string& role, uint64_t seq) {
  lease_->Report(role, seq).IgnoreError();  // (a status only: the next check reports again)
  auto info = lease_->Current();
  auto rows = lease_->Replicas();
  std::lock_guard<std::mutex> lock(mu_);
  if (info.ok() && role == "standby") {
    if (info->holder != leader_ && !info->holder.empty()) {
      std::fprintf(stderr, "rota: standby: the leader is %s (epoch %lld)\n", info->holder.c_str(),
                   static_cast<long long>(info->epoch));
    }
    leader_ = info->holder;
  }
  if (rows.ok()) replicas_ = std::move(rows).value();
}

void Replica::CatchUp(PgStore& store, std::unique_ptr<Recovered>* warm) {
  if (*warm == nullptr) {
    auto fresh = std::make_unique<Recovered>(options_.topology);
    if (Status s = store.Replay([&](const Event& e) { return fresh->Apply(e); }); !s.ok()) {
      std::fprintf(stderr, "rota: standby: cannot replay the journal: %s\n", s.ToString().c_str());
      return;
    }
    fresh->seq = store.last_seq();
    *warm = std::move(fresh);
    return;
  }
  Recovered& w = **warm;
  auto seq = store.Follow(w.seq, [&](const Event& e) {
    ROTA_RETURN_IF_ERROR(w.Apply(e));
    ++w.seq;
    return Status::Ok();
  });
  if (!seq.ok()) {
    // Compacted past us, or a state that may be half-applied: start over.
    if (seq.status().code() != StatusCode::kUnavailable) {
      std::fprintf(stderr, "rota: standby: replaying afresh: %s\n", seq.status().ToString().c_str());
    }
    warm->reset();
  }
}

int64_t Replica::WaitForLease(std::unique_ptr<PgStore>* store, std::unique_ptr<Recovered>* warm) {
  bool reported = false;
  Steady::time_point next_check = Steady::now();
  while (!stopping()) {
    if (*store == nullptr) {
      auto opened = PgStore::Open(options_.conninfo);
      if (opened.ok()) {
        *store = std::move(opened).value();
      } else {
        if (!reported) std::fprintf(stderr, "rota: standby: %s\n", opened.status().ToString().c_str());
        reported = true;
        if (!SleepFor(options_.lease / 6)) return 0;
        continue;
      }
    }
    CatchUp(**store, warm);
    if (Steady::now() >= next_check) {
      next_check = Steady::now() + std::chrono::microseconds(options_.lease / 6);
      // Reclaim: this process holds the port, so whatever server held the
      // lease at this address is gone.
      auto epoch = lease_->TryAcquire(options_.lease, /*reclaim=*/true);
      if (epoch.ok() && *epoch > 0) {
        // Every append of the old leader is committed now (the election
        // waited for any in flight, and its later ones are fenced): the tail.
        if (*warm != nullptr) CatchUp(**store, warm);
        return *epoch;
      }
      if (!epoch.ok()) {
        if (!reported) std::fprintf(stderr, "rota: standby: %s\n", epoch.status().ToString().c_str());
        reported = true;
      } else {
        reported = false;
      }
      Refresh("standby", *warm != nullptr ? (*warm)->seq : 0);
    }
    const Duration left = std::chrono::duration_cast<std::chrono::microseconds>(next_check - Steady::now()).count();
    (*store)->WaitForAppend(std::clamp<Duration>(left, 1000, options_.lease / 6));
  }
  return 0;
}

void Replica::HoldLease(int64_t epoch, const PgStore& store) {
  Steady::time_point renewed = Steady::now();  // when the last successful renewal was sent
  const Duration safe = options_.lease - options_.lease / 6;
  while (SleepFor(options_.lease / 3)) {
    if (store.fenced()) {
      std::fprintf(stderr, "rota: stepping down from epoch %lld to replay the journal: %s\n",
                   static_cast<long long>(epoch), store.stale_reason().c_str());
      return;
    }
    const Steady::time_point sent = Steady::now();
    auto renewed_ok = lease_->Renew(epoch, options_.lease);
    if (renewed_ok.ok() && *renewed_ok) {
      renewed = sent;
      Refresh("leader", store.last_seq());
      continue;
    }
    if (renewed_ok.ok()) {
      std::fprintf(stderr, "rota: lost the lease (epoch %lld): another server leads; stepping down\n",
                   static_cast<long long>(epoch));
      return;
    }
    if (Since(renewed) >= safe) {
      std::fprintf(stderr, "rota: cannot renew the lease (epoch %lld) in time: %s; stepping down\n",
                   static_cast<long long>(epoch), renewed_ok.status().ToString().c_str());
      return;
    }
  }
}

Status Replica::Run(const LeadFn& lead) {
  // A database that is down (or still starting) is waited for, not fatal.
  for (bool reported = false; lease_ == nullptr;) {
    auto lease = PgLease::Open(options_.conninfo, options_.advertise);
    if (lease.ok()) {
      lease_ = std::move(lease).value();
      break;
    }
    if (!reported) std::fprintf(stderr, "rota: waiting for the database: %s\n", lease.status().ToString().c_str());
    reported = true;
    if (!SleepFor(kMicrosPerSecond)) return Status::Ok();
  }
  while (true) {
    std::unique_ptr<PgStore> store;
    std::unique_ptr<Recovered> warm;
    int64_t epoch = 0;
    {
      ROTA_ASSIGN_OR_RETURN(std::unique_ptr<HttpTransport> standby, StartStandbyServer(options_.http, this));
      epoch = WaitForLease(&store, &warm);
      standby->Stop();
    }
    if (epoch == 0) return Status::Ok();  // Shutdown
    epoch_ = epoch;
    {
      std::lock_guard<std::mutex> lock(mu_);
      leader_ = options_.advertise;
    }
    const Steady::time_point took = Steady::now();
    const bool was_warm = warm != nullptr;
    store->SetFence(epoch);
    const PgStore* fenced_store = store.get();
    StatusOr<std::unique_ptr<Term>> term = lead(std::move(store), epoch, std::move(warm));
    if (!term.ok()) {
      std::fprintf(stderr, "rota: took the lease (epoch %lld) but cannot lead: %s\n", static_cast<long long>(epoch),
                   term.status().ToString().c_str());
      epoch_ = 0;
      lease_->Release(epoch).IgnoreError();
      if (!SleepFor(options_.lease)) return Status::Ok();
      continue;
    }
    std::fprintf(stderr, "rota: leading at epoch %lld (%s, serving %.0f ms after taking the lease)\n",
                 static_cast<long long>(epoch), was_warm ? "from the warm state" : "replayed the store",
                 static_cast<double>(Since(took)) / 1000.0);
    Refresh("leader", fenced_store->last_seq());
    HoldLease(epoch, *fenced_store);  // the term owns the store; it lives until Stop below
    (*term)->Stop();
    epoch_ = 0;
    if (stopping()) {
      // A clean shutdown: hand over at once instead of after the lease.
      lease_->Release(epoch).IgnoreError();
      return Status::Ok();
    }
  }
}

StatusOr<std::unique_ptr<HttpTransport>> StartStandbyServer(const HttpTransportOptions& options,
                                                            const Replica* replica) {
  auto transport = std::make_unique<HttpTransport>();
  transport->GetInline("/healthz", [replica](const HttpRequest&, HttpResponse& res) {
    const std::string leader = replica->leader();
    res.set_header("Rota-Role", "standby");
    if (!leader.empty()) res.set_header("Rota-Leader", leader);
    res.set_content("standby: the leader is " + (leader.empty() ? std::string("not known yet") : leader) + "\n",
                    "text/plain");
  });
  HttpHandler refuse = [replica](const HttpRequest&, HttpResponse& res) {
    const std::string leader = replica->leader();
    res.status = 503;
    res.set_header("Retry-After", "1");
    if (!leader.empty()) res.set_header("Rota-Leader", leader);
    nlohmann::ordered_json body{
        {"error",
         {{"code", "Unavailable"},
          {"message", "this rota server is a standby; " +
                          (leader.empty() ? std::string("no leader is known yet, retry shortly")
                                          : "send requests to the leader, " + leader)}}}};
    if (!leader.empty()) body["leader"] = leader;
    res.set_content(body.dump() + "\n", "application/json");
  };
  // A browser opening a standby's dashboard is sent to the leader's.
  transport->Get(R"(/|/[^/]*\.(html|js|css|ico))", [replica, refuse](const HttpRequest& req, HttpResponse& res) {
    const std::string leader = replica->leader();
    if (leader.empty() || leader == replica->advertise()) return refuse(req, res);
    res.status = 307;
    res.set_header("Location", leader + req.path);
    res.set_header("Rota-Leader", leader);
    res.set_content("the leader is " + leader + "\n", "text/plain");
  });
  transport->Get(".*", refuse);
  transport->Post(".*", refuse);
  transport->Delete(".*", refuse);
  ROTA_RETURN_IF_ERROR(transport->Start(options).status());
  return transport;
}

}  // namespace rota::server
