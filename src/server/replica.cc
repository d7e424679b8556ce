#include "server/replica.h"

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

void Replica::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

bool Replica::SleepFor(Duration d) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::microseconds(d), [this] { return stopping_; });
  return !stopping_;
}

StatusOr<int64_t> Replica::WaitForLease() {
  bool reported = false;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return int64_t{0};
    }
    // Reclaim: this process holds the port, so whatever server held the
    // lease at this address is gone.
    auto epoch = lease_->TryAcquire(options_.lease, /*reclaim=*/true);
    if (epoch.ok() && *epoch > 0) return *epoch;
    if (!epoch.ok()) {
      if (!reported) std::fprintf(stderr, "rota: standby: %s\n", epoch.status().ToString().c_str());
      reported = true;
    } else if (auto info = lease_->Current(); info.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (info->holder != leader_) {
        std::fprintf(stderr, "rota: standby: the leader is %s (epoch %lld)\n", info->holder.c_str(),
                     static_cast<long long>(info->epoch));
      }
      leader_ = info->holder;
      reported = false;
    }
    if (!SleepFor(options_.lease / 6)) return int64_t{0};
  }
}

void Replica::HoldLease(int64_t epoch, const PgStore& store) {
  Steady::time_point renewed = Steady::now();  // when the last successful renewal was sent
  const Duration safe = options_.lease - options_.lease / 6;
  while (SleepFor(options_.lease / 3)) {
    if (store.fenced()) {
      std::fprintf(stderr, "rota: the store refused a write under epoch %lld (another server leads): stepping down\n",
                   static_cast<long long>(epoch));
      return;
    }
    const Steady::time_point sent = Steady::now();
    auto renewed_ok = lease_->Renew(epoch, options_.lease);
    if (renewed_ok.ok() && *renewed_ok) {
      renewed = sent;
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
  ROTA_ASSIGN_OR_RETURN(lease_, PgLease::Open(options_.conninfo, options_.advertise));
  while (true) {
    {
      ROTA_ASSIGN_OR_RETURN(std::unique_ptr<HttpTransport> standby, StartStandbyServer(options_.http, this));
      ROTA_ASSIGN_OR_RETURN(int64_t epoch, WaitForLease());
      standby->Stop();
      if (epoch == 0) return Status::Ok();  // Shutdown
      epoch_ = epoch;
    }
    const int64_t epoch = epoch_;
    {
      std::lock_guard<std::mutex> lock(mu_);
      leader_ = options_.advertise;
    }
    const Steady::time_point took = Steady::now();
    auto store = PgStore::Open(options_.conninfo);
    StatusOr<std::unique_ptr<Term>> term = store.ok() ? StatusOr<std::unique_ptr<Term>>(InternalError("unset"))
                                                      : StatusOr<std::unique_ptr<Term>>(store.status());
    const PgStore* fenced_store = nullptr;
    if (store.ok()) {
      (*store)->SetFence(epoch);
      fenced_store = store->get();
      term = lead(std::move(store).value(), epoch);
    }
    if (!term.ok()) {
      std::fprintf(stderr, "rota: took the lease (epoch %lld) but cannot lead: %s\n", static_cast<long long>(epoch),
                   term.status().ToString().c_str());
      epoch_ = 0;
      lease_->Release(epoch).IgnoreError();
      if (!SleepFor(options_.lease)) return Status::Ok();
      continue;
    }
    std::fprintf(stderr, "rota: leading at epoch %lld (took over in %.0f ms)\n", static_cast<long long>(epoch),
                 static_cast<double>(Since(took)) / 1000.0);
    HoldLease(epoch, *fenced_store);  // the term owns the store; it lives until Stop below
    (*term)->Stop();
    epoch_ = 0;
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping = stopping_;
    }
    if (stopping) {
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
  transport->Get(".*", refuse);
  transport->Post(".*", refuse);
  transport->Delete(".*", refuse);
  ROTA_RETURN_IF_ERROR(transport->Start(options).status());
  return transport;
}

}  // namespace rota::server
