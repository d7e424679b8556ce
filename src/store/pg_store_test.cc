// PgStore beyond the contract, against a real PostgreSQL server: the lease
// and its fencing, standbys following the journal, a database restart, a
// changed record, and errors that never show the connection's password.
#include "store/pg_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>

#include "store/pg_test_server.h"

#include <libpq-fe.h>

#include <chrono>

namespace rota {
namespace {

constexpr Duration kMs = 1000;

NodeSpec Node(const std::string& name) {
  return {.name = name, .gpu_model = "H100", .gpus = 8, .cpu = 1000, .memory = 1024};
}

class PgStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string error;
    pg_ = TestPostgres::Start(&error).release();
    ASSERT_NE(pg_, nullptr) << error;
  }
  static void TearDownTestSuite() {
    delete pg_;
    pg_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(pg_, nullptr);
    static int n = 0;
    db_ = "pgstore_" + std::to_string(getpid()) + "_" + std::to_string(++n);
    conninfo_ = pg_->CreateDatabase(db_);
  }
  std::unique_ptr<PgStore> Open() {
    auto s = PgStore::Open(conninfo_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  std::unique_ptr<PgLease> Lease(const std::string& holder) {
    auto l = PgLease::Open(conninfo_, holder);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    return l.ok() ? std::move(l).value() : nullptr;
  }
  static int Count(PgStore& s) {
    int n = 0;
    EXPECT_TRUE(s.Replay([&](const Event&) {
                   ++n;
                   return Status::Ok();
                 }).ok());
    return n;
  }

  static TestPostgres* pg_;
  std::string db_, conninfo_;
};
TestPostgres* PgStoreTest::pg_ = nullptr;

TEST_F(PgStoreTest, OneLeaseHolderAtATimeWithAGrowingEpoch) {
  auto a = Lease("http://a:7070"), b = Lease("http://b:7070");
  EXPECT_EQ(*a->TryAcquire(300 * kMs, false), 1);
  EXPECT_EQ(*b->TryAcquire(300 * kMs, false), 0);  // held
  EXPECT_TRUE(*a->Renew(1, 300 * kMs));
  auto info = b->Current();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->holder, "http://a:7070");
  EXPECT_EQ(info->epoch, 1);
  EXPECT_GT(info->expires_in, 0);
  usleep(400 * 1000);  // a stops renewing: the lease runs out on the database's clock
  EXPECT_EQ(*b->TryAcquire(300 * kMs, false), 2);
  EXPECT_FALSE(*a->Renew(1, 300 * kMs));  // a lost it
  // b stepped down and comes back: its own lease, taken back at once.
  EXPECT_EQ(*b->TryAcquire(300 * kMs, false), 3);
  // A restarted b (a new process on the same address) reclaims at once on
  // its first try; another process at that address, later, cannot.
  auto b2 = Lease("http://b:7070"), b3 = Lease("http://b:7070");
  EXPECT_EQ(*b2->TryAcquire(300 * kMs, true), 4);
  EXPECT_EQ(*b3->TryAcquire(300 * kMs, false), 0);
  // A clean shutdown releases it: a takes over without waiting.
  ASSERT_TRUE(b2->Release(4).ok());
  EXPECT_EQ(*a->TryAcquire(300 * kMs, false), 5);
}

// A write in flight holds the lease row FOR KEY SHARE: an election waits for
// it (and here gives up, its lock wait bounded), while the leader's own
// renewals go through (a long snapshot must not cost the leader its lease).
TEST_F(PgStoreTest, AWriteInFlightHoldsOffAnElectionButNotARenewal) {
  auto leader = Lease("http://leader"), rival = Lease("http://rival");
  const int64_t epoch = *leader->TryAcquire(300 * kMs, false);
  PGconn* writer = PQconnectdb(conninfo_.c_str());
  ASSERT_EQ(PQstatus(writer), CONNECTION_OK);
  auto exec = [&](const char* sql) {
    PGresult* r = PQexec(writer, sql);
    const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
    PQclear(r);
    return ok;
  };
  ASSERT_TRUE(exec("BEGIN"));
  ASSERT_TRUE(exec("SELECT epoch FROM rota_leader WHERE id = 1 FOR KEY SHARE"));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(*leader->Renew(epoch, 300 * kMs));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(200));
  usleep(400 * 1000);  // the lease runs out; the write is still open
  EXPECT_FALSE(rival->TryAcquire(300 * kMs, false).ok());  // waited for the writer's lock, gave up
  ASSERT_TRUE(exec("COMMIT"));
  EXPECT_EQ(*rival->TryAcquire(300 * kMs, false), epoch + 1);
  PQfinish(writer);
}

TEST_F(PgStoreTest, AFencedLeaderCanNeverWriteAgain) {
  auto old_store = Open(), new_store = Open();
  auto old_lease = Lease("http://old"), new_lease = Lease("http://new");
  const int64_t old_epoch = *old_lease->TryAcquire(200 * kMs, false);
  old_store->SetFence(old_epoch);
  ASSERT_TRUE(old_store->Append({NodeAdded{Node("a")}}).ok());
  ASSERT_TRUE(old_store->PutToken({"h1", "alice", "user", "", 1}).ok());
  usleep(300 * 1000);  // the old leader is paused past its lease
  const int64_t new_epoch = *new_lease->TryAcquire(200 * kMs, false);
  ASSERT_EQ(new_epoch, old_epoch + 1);
  ASSERT_TRUE(new_store->Replay([](const Event&) { return Status::Ok(); }).ok());
  new_store->SetFence(new_epoch);
  ASSERT_TRUE(new_store->Append({NodeAdded{Node("b")}}).ok());

  // The old leader wakes and tries every kind of write: each is refused.
  auto appended = old_store->Append({NodeAdded{Node("stale")}});
  EXPECT_EQ(appended.status().code(), StatusCode::kFailedPrecondition) << appended.status().ToString();
  EXPECT_NE(appended.status().message().find("another rota server leads now"), std::string::npos);
  EXPECT_TRUE(old_store->fenced());
  EXPECT_EQ(old_store->PutToken({"h2", "mallory", "admin", "", 2}).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(old_store->WriteSnapshot(1, EventsOf({NodeAdded{Node("stale-snapshot")}})).code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(new_store->fenced());

  auto check = Open();
  std::vector<std::string> names;
  ASSERT_TRUE(check->Replay([&](const Event& e) {
                   if (auto* n = std::get_if<NodeAdded>(&e)) names.push_back(n->spec.name);
                   return Status::Ok();
                 }).ok());
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(check->Tokens()->size(), 1u);
}

// Two writers with no lease between them (a misconfiguration): the second
// append at a taken position is refused, and that store knows it is stale.
TEST_F(PgStoreTest, AJournalThatGrewBehindAStoresBackMakesItStale) {
  auto a = Open(), b = Open();
  ASSERT_TRUE(a->Append({NodeAdded{Node("a")}}).ok());
  auto stale = b->Append({NodeAdded{Node("b")}});
  EXPECT_FALSE(stale.ok());
  EXPECT_TRUE(b->fenced());
  EXPECT_NE(b->stale_reason().find("grew behind this server's back"), std::string::npos) << b->stale_reason();
  EXPECT_FALSE(a->fenced());
  EXPECT_EQ(Count(*Open()), 1);
}

TEST_F(PgStoreTest, AStandbyFollowsTheJournalAsItGrows) {
  auto leader = Open(), standby = Open();
  std::vector<std::string> seen;
  auto follow = [&](uint64_t from) {
    return standby->Follow(from, [&](const Event& e) {
      if (auto* n = std::get_if<NodeAdded>(&e)) seen.push_back(n->spec.name);
      return Status::Ok();
    });
  };
  EXPECT_FALSE(standby->WaitForAppend(50 * kMs));  // listening; nothing yet
  std::thread writer([&] {
    usleep(50 * 1000);
    ASSERT_TRUE(leader->Append({NodeAdded{Node("a")}, NodeAdded{Node("b")}}).ok());
  });
  EXPECT_TRUE(standby->WaitForAppend(5000 * kMs));
  writer.join();
  EXPECT_EQ(*follow(0), 2u);
  ASSERT_TRUE(leader->Append({NodeAdded{Node("c")}}).ok());
  EXPECT_EQ(*follow(2), 3u);
  EXPECT_EQ(seen, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(*follow(3), 3u);  // nothing new

  // Compacted behind the standby's position: it must replay the snapshot.
  ASSERT_TRUE(leader->Append({NodeAdded{Node("d")}}).ok());
  ASSERT_TRUE(leader->WriteSnapshot(4, EventsOf({NodeAdded{Node("all")}})).ok());
  EXPECT_EQ(follow(3).status().code(), StatusCode::kDataLoss);
  ASSERT_TRUE(leader->Append({NodeAdded{Node("e")}}).ok());
  EXPECT_EQ(follow(3).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(*follow(4), 5u);
}

TEST_F(PgStoreTest, SurvivesARestartOfTheDatabase) {
  auto s = Open();
  ASSERT_TRUE(s->Append({NodeAdded{Node("a")}}).ok());
  ASSERT_TRUE(pg_->Restart());
  // The broken connection is opened again; nothing acknowledged is lost.
  StatusOr<uint64_t> seq = s->Append({NodeAdded{Node("b")}});
  ASSERT_TRUE(seq.ok()) << seq.status().ToString();
  EXPECT_EQ(*seq, 2u);
  EXPECT_EQ(Count(*Open()), 2);
}

TEST_F(PgStoreTest, AChangedRecordFailsItsChecksum) {
  auto s = Open();
  ASSERT_TRUE(s->Append({NodeAdded{Node("n1")}, NodeAdded{Node("n2")}, NodeAdded{Node("n3")}}).ok());
  ASSERT_TRUE(pg_->Sql(db_, "UPDATE rota_events SET body = replace(body, 'n2', 'n9') WHERE seq = 2"));
  Status r = Open()->Replay([](const Event&) { return Status::Ok(); });
  EXPECT_EQ(r.code(), StatusCode::kDataLoss);
  EXPECT_NE(r.message().find("journal event 2 fails its checksum"), std::string::npos) << r.ToString();
}

TEST_F(PgStoreTest, ADeletedRowStopsTheOpenOrTheReplay) {
  auto s = Open();
  ASSERT_TRUE(s->Append({NodeAdded{Node("n1")}, NodeAdded{Node("n2")}, NodeAdded{Node("n3")}}).ok());
  ASSERT_TRUE(pg_->Sql(db_, "DELETE FROM rota_events WHERE seq = 2"));
  Status r = Open()->Replay([](const Event&) { return Status::Ok(); });
  EXPECT_EQ(r.code(), StatusCode::kDataLoss);
  EXPECT_NE(r.message().find("journal event 2 is missing (the next is 3)"), std::string::npos) << r.ToString();
  ASSERT_TRUE(pg_->Sql(db_, "DELETE FROM rota_events WHERE seq = 3"));
  auto reopened = PgStore::Open(conninfo_);
  EXPECT_EQ(reopened.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(reopened.status().message().find("event 2 is missing"), std::string::npos) << reopened.status().ToString();
}

TEST_F(PgStoreTest, AnUnreachableDatabaseIsUnavailableWithoutThePassword) {
  auto s = PgStore::Open("host=127.0.0.1 port=1 user=rota password=hunter2 dbname=x connect_timeout=2");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(s.status().message().find("cannot connect"), std::string::npos) << s.status().ToString();
  EXPECT_EQ(s.status().message().find("hunter2"), std::string::npos) << s.status().ToString();
}

TEST(PgConninfo, APasswordOnTheCommandLineIsRefusedNamingWhereItGoes) {
  EXPECT_TRUE(CheckConninfo("postgresql://rota@db:5432/rota").ok());
  EXPECT_TRUE(CheckConninfo("host=db port=5432 user=rota dbname=rota").ok());
  Status s = CheckConninfo("postgresql://rota:hunter2@db/rota");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("PGPASSWORD"), std::string::npos) << s.ToString();
  EXPECT_EQ(s.message().find("hunter2"), std::string::npos) << s.ToString();
  EXPECT_EQ(CheckConninfo("host=db password=x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckConninfo("postgresql://db/rota?bogus=1").code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rota
