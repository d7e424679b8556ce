// One contract suite over every Store implementation.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "store/memory_store.h"
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

template <typename F>
class StoreContract : public ::testing::Test {
 protected:
  F factory;
};
using Factories = ::testing::Types<MemoryFactory, SqliteFactory>;
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
  ASSERT_TRUE(s->WriteSnapshot(2, {NodeAdded{Node("compacted")}}).ok());
  ASSERT_TRUE(s->Append({NodeAdded{Node("c")}}).ok());
  s = this->factory.Reopen(std::move(s));
  EXPECT_EQ(Names(*s), (std::vector<std::string>{"compacted", "c"}));
  EXPECT_EQ(s->last_seq(), 3u);
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

TEST(SqliteStore, ReportsAnUnopenablePath) {
  auto s = SqliteStore::Open("/nonexistent-dir/x/rota.db");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace rota
