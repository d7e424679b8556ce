// One contract suite over every Store implementation.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "base/random_hex.h"
#include "store/memory_store.h"
#include "store/pg_store.h"
#include "store/pg_test_server.h"
#include "store/sqlite_store.h"

namespace rota {
namespace {

struct MemoryFactory {
  std::unique_ptr<Store> Make() { return std::make_unique<MemoryStore>(); }
  // A memory store cannot be reopened: hand back the same object.
  std::unique_ptr<Store> Reopen(std::unique_ptr<Store> s) { return s; }
};

struct SqliteFactory {
  std::string dir;
  SqliteFactory() {
    char tmpl[] = "/tmp/rota-store-XXXXXX";
    dir = mkdtemp(tmpl);
  }
  ~SqliteFactory() { std::filesystem::remove_all(dir); }
  std::unique_ptr<Store> Make() { return std::move(SqliteStore::Open(dir + "/rota.db")).value(); }
  std::unique_ptr<Store> Reopen(std::unique_ptr<Store> s) {
    s.reset();
    return Make();
  }
};

// One PostgreSQL server for the whole binary; a fresh database per test.
TestPostgres& SharedPostgres() {
  static std::unique_ptr<TestPostgres> pg = [] {
    std::string error;
    auto started = TestPostgres::Start(&error);
    if (!started) {
      ADD_FAILURE() << "cannot start PostgreSQL: " << error;
      std::abort();
    }
    return started;
  }();
  return *pg;
}

struct PgFactory {
  std::string conninfo;
  PgFactory() {
    static int n = 0;
    conninfo = SharedPostgres().CreateDatabase("contract_" + std::to_string(getpid()) + "_" + std::to_string(++n));
  }
  std::unique_ptr<Store> Make() {
    auto s = PgStore::Open(conninfo);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return std::move(s).value();
  }
  std::unique_ptr<Store> Reopen(std::unique_ptr<Store> s) {
    s.reset();
    return Make();
  }
};

template <typename F>
class StoreContract : public ::testing::Test {
 protected:
  F factory;
};
using Factories = ::testing::Types<MemoryFactory, SqliteFactory, PgFactory>;
TYPED_TEST_SUITE(StoreContract, Factories);

NodeSpec Node(const std::string& name) {
  return {.name = name, .gpu_model = "H100", .gpus = 8, .cpu = 1000, .memory = 1024};
}

std::vector<std::string> Names(Store& s) {
  std::vector<std::string> out;
  EXPECT_TRUE(s.Replay([&](const Event& e) {
                 if (auto* n = std::get_if<NodeAdded>(&e)) out.push_back(n->spec.name);
                 if (auto* d = std::get_if<NodeDrainChanged>(&e)) out.push_back("drain:" + d->node);
                 return Status::Ok();
               }).ok());
  return out;
}

TYPED_TEST(StoreContract, AppendsInOrderAndSurvivesReopen) {
  auto s = this->factory.Make();
  EXPECT_EQ(s->last_seq(), 0u);
  EXPECT_EQ(*s->Append({NodeAdded{Node("a")}, NodeAdded{Node("b")}}), 2u);
  EXPECT_EQ(*s->Append({NodeDrainChanged{"a", true}}), 3u);
  s = this->factory.Reopen(std::move(s));
  EXPECT_EQ(s->last_seq(), 3u);
  EXPECT_EQ(Names(*s), (std::vector<std::string>{"a", "b", "drain:a"}));
}

TYPED_TEST(StoreContract, SnapshotReplacesThePrefix) {
  auto s = this->factory.Make();
  ASSERT_TRUE(s->Append({NodeAdded{Node("a")}, NodeAdded{Node("b")}}).ok());
  ASSERT_TRUE(s->WriteSnapshot(2, EventsOf({NodeAdded{Node("compacted")}})).ok());
  ASSERT_TRUE(s->Append({NodeAdded{Node("c")}}).ok());
  s = this->factory.Reopen(std::move(s));
  EXPECT_EQ(Names(*s), (std::vector<std::string>{"compacted", "c"}));
  EXPECT_EQ(s->last_seq(), 3u);
}

// A snapshot of several parts (each about kSnapshotPartBytes of events)
// reads back whole and in order; a later, smaller snapshot at a new event
// replaces it with nothing of the old left over.
TYPED_TEST(StoreContract, SnapshotsLargerThanOnePartReadBackWholeAndInOrder) {
  auto s = this->factory.Make();
  ASSERT_TRUE(s->Append({NodeAdded{Node("a")}}).ok());
  const std::string pad(200, 'x');
  int produced = 0;
  ASSERT_TRUE(s->WriteSnapshot(1, [&](const EventSink& sink) {
                 // Made one at a time as they are written: about 3 parts.
                 for (; produced < 3 * static_cast<int>(kSnapshotPartBytes / 300); ++produced) {
                   ROTA_RETURN_IF_ERROR(sink(NodeAdded{Node("n" + std::to_string(produced) + pad)}));
                 }
                 return Status::Ok();
               }).ok());
  ASSERT_TRUE(s->Append({NodeAdded{Node("tail")}}).ok());
  s = this->factory.Reopen(std::move(s));
  std::vector<std::string> names = Names(*s);
  ASSERT_EQ(names.size(), static_cast<size_t>(produced) + 1);
  for (int i = 0; i < produced; ++i) ASSERT_EQ(names[i], "n" + std::to_string(i) + pad) << i;
  EXPECT_EQ(names.back(), "tail");

  ASSERT_TRUE(s->WriteSnapshot(2, EventsOf({NodeAdded{Node("small")}})).ok());
  s = this->factory.Reopen(std::move(s));
  EXPECT_EQ(Names(*s), (std::vector<std::string>{"small"}));
}

// A source that fails part-way writes nothing: the previous snapshot and the
// journal after it are still what replays, and the error is returned.
TYPED_TEST(StoreContract, ASnapshotWhoseSourceFailsWritesNothing) {
  auto s = this->factory.Make();
  ASSERT_TRUE(s->Append({NodeAdded{Node("a")}}).ok());
  ASSERT_TRUE(s->WriteSnapshot(1, EventsOf({NodeAdded{Node("first")}})).ok());
  ASSERT_TRUE(s->Append({NodeAdded{Node("b")}}).ok());
  const std::string pad(500, 'y');
  Status failed = s->WriteSnapshot(2, [&](const EventSink& sink) -> Status {
    // Past the first part, so that some of it reached the store.
    for (int i = 0; i < static_cast<int>(2 * kSnapshotPartBytes / 500); ++i) {
      ROTA_RETURN_IF_ERROR(sink(NodeAdded{Node("lost" + pad)}));
    }
    return InternalError("the state could not be read");
  });
  EXPECT_EQ(failed.code(), StatusCode::kInternal);
  EXPECT_EQ(failed.message(), "the state could not be read");
  s = this->factory.Reopen(std::move(s));
  EXPECT_EQ(Names(*s), (std::vector<std::string>{"first", "b"}));
  EXPECT_EQ(s->last_seq(), 2u);
}

// A value kept is the first one given, for good: the same after a reopen,
// whatever is given later; none before.
TYPED_TEST(StoreContract, KeepsTheFirstValueGivenUnderAName) {
  auto s = this->factory.Make();
  auto none = s->Kept("rendezvous_key_0");
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->has_value());
  const uint64_t key = SecureRandom63();
  EXPECT_LE(key, uint64_t{INT64_MAX});
  EXPECT_EQ(*s->Keep("rendezvous_key_0", key), key);
  EXPECT_EQ(*s->Keep("rendezvous_key_0", key + 1), key);
  EXPECT_EQ(*s->Keep("other", 42), 42u);
  EXPECT_EQ(*s->Keep("masked", ~uint64_t{0}), uint64_t{INT64_MAX});  // (63 bits)
  s = this->factory.Reopen(std::move(s));
  EXPECT_EQ(*s->Kept("rendezvous_key_0"), std::optional<uint64_t>(key));
  EXPECT_EQ(*s->Keep("other", 7), 42u);
}

// `rota store migrate` copies the kept values (CopyKept) without writing
// to its source; a destination that keeps another is refused with nothing
// written.
TYPED_TEST(StoreContract, TakesAnotherStoresKeptValues) {
  MemoryStore from;
  ASSERT_TRUE(from.Keep("a", 5).ok());
  auto s = this->factory.Make();
  ASSERT_TRUE(CopyKept(from, *s, {"a", "b"}).ok());
  EXPECT_FALSE(from.Kept("b")->has_value());  // (the source's none stays none)
  EXPECT_FALSE(s->Kept("b")->has_value());
  s = this->factory.Reopen(std::move(s));
  EXPECT_EQ(*s->Kept("a"), std::optional<uint64_t>(5));
  MemoryStore other;
  ASSERT_TRUE(other.Keep("a", 6).ok());
  ASSERT_TRUE(other.Keep("b", 7).ok());
  EXPECT_EQ(CopyKept(other, *s, {"b", "a"}).code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(s->Kept("b")->has_value());  // (refused before "b" was written)
}

TYPED_TEST(StoreContract, KeepsTokens) {
  auto s = this->factory.Make();
  ASSERT_TRUE(s->PutToken({"h1", "alice", "user", "", 1}).ok());
  ASSERT_TRUE(s->PutToken({"h2", "n-0", "agent", "n-0", 2}).ok());
  s = this->factory.Reopen(std::move(s));
  auto tokens = s->Tokens();
  ASSERT_TRUE(tokens.ok());
  ASSERT_EQ(tokens->size(), 2u);
  EXPECT_EQ((*tokens)[1].node, "n-0");
}

TYPED_TEST(StoreContract, KeepsUsageRecordsApartFromTheJournal) {
  auto s = this->factory.Make();
  auto record = [](uint64_t job, int32_t attempt, TimePoint ended, std::string user) {
    UsageRecord r;
    r.job = JobId(job);
    r.attempt = attempt;
    r.user = std::move(user);
    r.name = "quote \" and \\ and , {}";
    r.ended_at = ended;
    r.started_at = ended - 10;
    r.gpus = 2;
    r.activity.Add(30, 20);
    r.energy_mj = 5'000'000'000'000;
    return r;
  };
  ASSERT_TRUE(s->PutUsage({record(1, 0, 100, "alice"), record(2, 0, 300, "bob"), record(1, 1, 200, "alice")}).ok());
  // The same attempt again (a standby that also wrote it) changes nothing.
  ASSERT_TRUE(s->PutUsage({record(1, 0, 100, "mallory")}).ok());
  ASSERT_TRUE(s->PutUsage({}).ok());
  ASSERT_TRUE(s->WriteSnapshot(0, EventsOf({})).ok());  // a snapshot does not touch them
  s = this->factory.Reopen(std::move(s));
  auto all = s->Usage(0, 1000);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0], record(1, 0, 100, "alice"));
  EXPECT_EQ((*all)[1].attempt, 1);  // by end time
  EXPECT_EQ((*all)[2].user, "bob");
  auto window = s->Usage(100, 300);
  ASSERT_TRUE(window.ok());
  EXPECT_EQ(window->size(), 2u);  // [since, until)
  // One job's, by attempt, however they ended.
  auto one = s->UsageOfJob(JobId(1));
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  ASSERT_EQ(one->size(), 2u);
  EXPECT_EQ((*one)[0], record(1, 0, 100, "alice"));
  EXPECT_EQ((*one)[1].attempt, 1);
  EXPECT_TRUE(s->UsageOfJob(JobId(3))->empty());
  auto dropped = s->DropUsage(250);
  ASSERT_TRUE(dropped.ok()) << dropped.status().ToString();
  EXPECT_EQ(*dropped, 2);
  EXPECT_EQ(s->Usage(0, 1000)->size(), 1u);
}

TYPED_TEST(StoreContract, KeepsGpuHistoryBlocksAndReplacesThemAsTheyFill) {
  auto s = this->factory.Make();
  constexpr TimePoint kHour = 3600 * kMicrosPerSecond;
  auto block = [](std::string node, int32_t gpu, int32_t step, TimePoint start, int32_t filled) {
    GpuHistoryBlock b;
    b.node = std::move(node);
    b.gpu = gpu;
    b.step_s = step;
    b.start = start;
    b.points.resize(b.size());
    for (int32_t i = 0; i < filled; ++i) {
      b.points[i] = {.samples = 60, .activity = i % 101, .memory_peak = 1000 + i, .energy_j = 4000 - i};
    }
    return b;
  };
  ASSERT_TRUE(s->PutGpuHistory({block("n-0", 0, 60, 0, 10), block("n-0", 1, 60, 0, 60), block("n-1", 0, 60, kHour, 5),
                                block("n-0", 0, 3600, 0, 3)})
                  .ok());
  // The same block again, fuller: it replaces the first.
  ASSERT_TRUE(s->PutGpuHistory({block("n-0", 0, 60, 0, 30)}).ok());
  ASSERT_TRUE(s->PutGpuHistory({}).ok());
  ASSERT_TRUE(s->WriteSnapshot(0, EventsOf({})).ok());  // a snapshot does not touch them
  s = this->factory.Reopen(std::move(s));
  auto all = s->GpuHistory("", 60, 0, 2 * kHour);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0], block("n-0", 0, 60, 0, 30));  // by node, GPU and start
  EXPECT_EQ((*all)[1], block("n-0", 1, 60, 0, 60));
  EXPECT_EQ((*all)[2], block("n-1", 0, 60, kHour, 5));
  auto one = s->GpuHistory("n-1", 60, 0, 2 * kHour);
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ(s->GpuHistory("", 60, kHour, 2 * kHour)->size(), 1u);  // [since, until)
  auto hours = s->GpuHistory("n-0", 3600, 0, 24 * kHour);
  ASSERT_TRUE(hours.ok());
  ASSERT_EQ(hours->size(), 1u);
  EXPECT_EQ((*hours)[0], block("n-0", 0, 3600, 0, 3));
  auto dropped = s->DropGpuHistory(60, kHour);
  ASSERT_TRUE(dropped.ok()) << dropped.status().ToString();
  EXPECT_EQ(*dropped, 2);
  EXPECT_EQ(s->GpuHistory("", 60, 0, 2 * kHour)->size(), 1u);
  EXPECT_EQ(s->GpuHistory("", 3600, 0, 24 * kHour)->size(), 1u);  // the other step is kept
}

TYPED_TEST(StoreContract, KeepsAnyTextExactly) {
  // Quotes, backslashes, braces, commas, newlines, tabs and UTF-8: what a
  // label or a name may hold must come back byte for byte.
  const std::string odd = "a\"b\\c{d},e\nf\tg \xc3\xa9 NULL \\\"";
  NodeSpec n = Node(odd);
  n.labels["k"] = odd;
  auto s = this->factory.Make();
  ASSERT_TRUE(s->Append({NodeAdded{n}, NodeAdded{Node("plain")}}).ok());
  s = this->factory.Reopen(std::move(s));
  std::vector<NodeSpec> back;
  ASSERT_TRUE(s->Replay([&](const Event& e) {
                 if (auto* a = std::get_if<NodeAdded>(&e)) back.push_back(a->spec);
                 return Status::Ok();
               }).ok());
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].name, odd);
  EXPECT_EQ(back[0].labels["k"], odd);
}

TYPED_TEST(StoreContract, ALargeBatchIsOneAppend) {
  auto s = this->factory.Make();
  std::vector<Event> batch;
  for (int i = 0; i < 20000; ++i) batch.push_back(NodeAdded{Node("n" + std::to_string(i))});
  EXPECT_EQ(*s->Append(batch), 20000u);
  EXPECT_EQ(*s->Append({NodeDrainChanged{"n7", true}}), 20001u);
  s = this->factory.Reopen(std::move(s));
  const std::vector<std::string> names = Names(*s);
  ASSERT_EQ(names.size(), 20001u);
  EXPECT_EQ(names[19999], "n19999");
  EXPECT_EQ(names.back(), "drain:n7");
}

TYPED_TEST(StoreContract, KeepsRevocationAndExpiry) {
  auto s = this->factory.Make();
  ASSERT_TRUE(s->PutToken({"h1", "alice", "user", "", 1, 99}).ok());
  ASSERT_TRUE(s->PutToken({"h1", "alice", "user", "", 1, 99, true}).ok());  // revoked: the same hash again
  s = this->factory.Reopen(std::move(s));
  auto tokens = s->Tokens();
  ASSERT_TRUE(tokens.ok());
  ASSERT_EQ(tokens->size(), 1u);
  EXPECT_EQ((*tokens)[0].expires_at, 99);
  EXPECT_TRUE((*tokens)[0].revoked);
}

TEST(SqliteStore, ReportsAnUnopenablePath) {
  auto s = SqliteStore::Open("/nonexistent-dir/x/rota.db");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace rota
