#include "server/replica.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

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
    // A lease that ran out names nobody: clients then try the next replica
    // instead of the holder that is likely gone.
    const std::string holder = info->expires_in > 0 ? info->holder : "";
    if (holder != leader_ && !holder.empty()) {
      std::fprintf(stderr, "rota: standby: the leader is %s (epoch %lld)\n", holder.c_str(),
                   static_cast<long long>(info->epoch));
    }
    leader_ = holder;
  }
  if (rows.ok()) replicas_ = std::move(rows).value();
}

int64_t Replica::WaitForLease(PgStore& store, Term& term) {
  bool reported = false;
  Steady::time_point next_check = Steady::now();
  while (!stopping()) {
    if (Status s = term.CatchUp(); !s.ok()) {
      if (s.code() != StatusCode::kUnavailable) {
        std::fprintf(stderr, "rota: standby: replaying afresh: %s\n", s.ToString().c_str());
        return -1;
      }
    }
    if (Steady::now() >= next_check) {
      next_check = Steady::now() + std::chrono::microseconds(options_.lease / 6);
      // On this process's first try, a lease held at this address is taken
      // back: this process bound the port, so its holder is gone.
      const Steady::time_point sent = Steady::now();
      auto epoch = lease_->TryAcquire(options_.lease, /*at_startup=*/first_try_);
      first_try_ = false;
      if (epoch.ok() && *epoch > 0) {
        // The database stamped the lease after this was sent: ours runs from here.
        acquired_sent_ = sent;
        return *epoch;
      }
      if (!epoch.ok()) {
        if (!reported) std::fprintf(stderr, "rota: standby: %s\n", epoch.status().ToString().c_str());
        reported = true;
      } else {
        reported = false;
      }
      Refresh("standby", store.last_seq());
      term.ReloadTokens().IgnoreError();  // (tokens are made on the leader; the next check reads them again)
    }
    const Duration left = std::chrono::duration_cast<std::chrono::microseconds>(next_check - Steady::now()).count();
    store.WaitForAppend(std::clamp<Duration>(left, 1000, options_.lease / 6));
  }
  return 0;
}

bool Replica::leading() const {
  return epoch_ > 0 && Steady::now().time_since_epoch().count() < valid_until_.load();
}

void Replica::HoldLease(int64_t epoch, const PgStore& store) {
  const Duration safe = options_.lease - options_.lease / 6;
  Steady::time_point renewed = acquired_sent_;  // when the last successful renewal was sent
  // The first renewal at once (taking over took time off the lease), then
  // every lease / 3, never sleeping past the deadline. The replicas' view is
  // refreshed every third renewal (its queries must not crowd the renewals).
  int renewals = 0;
  for (bool first = true;; first = false) {
    if (!first) {
      const Steady::time_point deadline = renewed + std::chrono::microseconds(safe);
      const Duration until = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Steady::now()).count();
      if (!SleepFor(std::clamp<Duration>(until, 0, options_.lease / 3))) return;
    }
    if (stopping()) return;
    if (store.fenced()) {
      std::fprintf(stderr, "rota: stepping down from epoch %lld to replay the journal: %s\n",
                   static_cast<long long>(epoch), store.stale_reason().c_str());
      return;
    }
    if (Since(renewed) >= safe) {
      std::fprintf(stderr, "rota: the lease (epoch %lld) was not renewed in time; stepping down\n",
                   static_cast<long long>(epoch));
      return;
    }
    const Steady::time_point sent = Steady::now();
    auto renewed_ok = lease_->Renew(epoch, options_.lease);
    if (renewed_ok.ok() && *renewed_ok) {
      renewed = sent;
      valid_until_ = (sent + std::chrono::microseconds(safe)).time_since_epoch().count();
      if (renewals++ % 3 == 0) Refresh("leader", store.last_seq());
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

Status Replica::Run(const MakeTerm& make) {
  // A database that is down (or still starting) is waited for, not fatal.
  for (bool reported = false; lease_ == nullptr;) {
    auto lease = PgLease::Open(options_.conninfo, options_.advertise, options_.lease);
    if (lease.ok()) {
      lease_ = std::move(lease).value();
      break;
    }
    if (!reported) std::fprintf(stderr, "rota: waiting for the database: %s\n", lease.status().ToString().c_str());
    reported = true;
    if (!SleepFor(kMicrosPerSecond)) return Status::Ok();
  }
  while (!stopping()) {
    // A standby: a store, a controller following it, the API.
    auto store = PgStore::Open(options_.conninfo);
    if (!store.ok()) {
      std::fprintf(stderr, "rota: standby: %s\n", store.status().ToString().c_str());
      SleepFor(options_.lease / 6);
      continue;
    }
    PgStore& followed = **store;
    auto made = make(std::move(store).value());
    if (!made.ok()) {
      std::fprintf(stderr, "rota: standby: cannot follow the journal: %s\n", made.status().ToString().c_str());
      SleepFor(kMicrosPerSecond);
      continue;
    }
    std::unique_ptr<Term> term = std::move(made).value();
    const int64_t epoch = WaitForLease(followed, *term);
    if (epoch <= 0) {
      term->Stop();
      continue;  // Shutdown, or a state that cannot go on: a new term
    }
    const Steady::time_point took = Steady::now();
    // Every append of the old leader is committed now (the election waited
    // for any in flight, and its later ones are fenced): the tail, then lead.
    Status led = term->CatchUp();
    if (led.ok()) {
      followed.SetFence(epoch);
      led = term->Lead(epoch);
    }
    if (!led.ok()) {
      std::fprintf(stderr, "rota: took the lease (epoch %lld) but cannot lead: %s\n", static_cast<long long>(epoch),
                   led.ToString().c_str());
      term->Stop();
      lease_->Release(epoch).IgnoreError();
      SleepFor(options_.lease);
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      leader_ = options_.advertise;
    }
    valid_until_ = (acquired_sent_ + std::chrono::microseconds(options_.lease - options_.lease / 6))
                       .time_since_epoch()
                       .count();
    epoch_ = epoch;
    std::fprintf(stderr, "rota: leading at epoch %lld (serving %.0f ms after taking the lease)\n",
                 static_cast<long long>(epoch), static_cast<double>(Since(took)) / 1000.0);
    Refresh("leader", followed.last_seq());
    HoldLease(epoch, followed);
    epoch_ = 0;
    term->Stop();  // (the store goes with it)
    if (stopping()) {
      // A clean shutdown: hand over at once instead of after the lease.
      lease_->Release(epoch).IgnoreError();
    }
  }
  return Status::Ok();
}

}  // namespace rota::server
