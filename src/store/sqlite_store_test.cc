// SqliteStore beyond the contract: nothing is lost silently. A changed
// record, a deleted one, a corrupt WAL frame and a damaged page each stop
// the open or the replay with the event (or frame) and the reason; a disk
// that refuses writes is InsufficientStorage and changes nothing.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/mount.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include "store/sqlite_store.h"

namespace rota {
namespace {

NodeSpec Node(const std::string& name) {
  return {.name = name, .gpu_model = "H100", .gpus = 8, .cpu = 1000, .memory = 1024};
}

class SqliteStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/rota-sqlite-XXXXXX";
    dir = mkdtemp(tmpl);
    path = dir + "/rota.db";
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  // Five events, in five transactions.
  void Fill() {
    auto s = SqliteStore::Open(path);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    for (int i = 0; i < 5; ++i) ASSERT_TRUE((*s)->Append({NodeAdded{Node("n" + std::to_string(i))}}).ok());
  }
  // Runs SQL on the file behind the store's back (what an operator's slip or a bad disk does).
  void Sql(const std::string& sql, const std::string& file = "") {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((file.empty() ? path : file).c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  }
  // `n` events (nodes n0, n1, ...), then a snapshot at event n that holds
  // one node, "all".
  static void FillBehindSnapshot(SqliteStore& s, int n) {
    std::vector<Event> many;
    for (int i = 0; i < n; ++i) many.push_back(NodeAdded{Node("n" + std::to_string(i))});
    ASSERT_TRUE(s.Append(many).ok());
    ASSERT_TRUE(s.WriteSnapshot(static_cast<uint64_t>(n), [](const EventSink& sink) { return sink(NodeAdded{Node("all")}); }).ok());
  }
  // The rows in the journal's events table (-1: unreadable).
  int64_t JournalRows() const {
    sqlite3* db = nullptr;
    int64_t n = -1;
    if (sqlite3_open(path.c_str(), &db) == SQLITE_OK) {
      sqlite3_stmt* st = nullptr;
      if (sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM events", -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
        n = sqlite3_column_int64(st, 0);
      }
      sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return n;
  }
  Status ReplayAll() {
    auto s = SqliteStore::Open(path);
    if (!s.ok()) return s.status();
    return (*s)->Replay([](const Event&) { return Status::Ok(); });
  }
  // Five events, then a snapshot at event 5 of `parts` parts (each over
  // kSnapshotPartBytes of node names), then event 6.
  void FillWithSnapshot(int parts) {
    Fill();
    auto s = SqliteStore::Open(path);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    const std::string pad(kSnapshotPartBytes / 2, 'p');
    ASSERT_TRUE((*s)->WriteSnapshot(5, [&](const EventSink& sink) {
                   for (int i = 0; i < 2 * parts; ++i) ROTA_RETURN_IF_ERROR(sink(NodeAdded{Node(std::to_string(i) + pad)}));
                   return Status::Ok();
                 }).ok());
    ASSERT_TRUE((*s)->Append({NodeAdded{Node("n5")}}).ok());
  }
  std::string dir, path;
};

TEST_F(SqliteStoreTest, ADeletedJournalRowStopsTheReplayNamingTheEvent) {
  Fill();
  Sql("DELETE FROM events WHERE seq = 3");
  Status s = ReplayAll();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("journal event 3 is missing (the next is 4)"), std::string::npos) << s.ToString();
}

TEST_F(SqliteStoreTest, ADeletedLastRowStopsTheOpen) {
  Fill();
  Sql("DELETE FROM events WHERE seq = 5");
  Status s = ReplayAll();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("event 5 is missing"), std::string::npos) << s.ToString();
}

TEST_F(SqliteStoreTest, AChangedRecordFailsItsChecksum) {
  Fill();
  Sql("UPDATE events SET body = replace(body, 'n2', 'n9') WHERE seq = 3");
  Status s = ReplayAll();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("journal event 3 fails its checksum"), std::string::npos) << s.ToString();
}

TEST_F(SqliteStoreTest, AnIntactStoreReplaysEverything) {
  Fill();
  int n = 0;
  auto s = SqliteStore::Open(path);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Replay([&](const Event&) { ++n; return Status::Ok(); }).ok());
  EXPECT_EQ(n, 5);
}

TEST_F(SqliteStoreTest, AChangedMissingOrMovedSnapshotPartStopsTheReplayNamingThePart) {
  FillWithSnapshot(3);
  {
    std::vector<std::string> names;
    auto s = SqliteStore::Open(path);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->Replay([&](const Event& e) {
                   names.push_back(std::get<NodeAdded>(e).spec.name.substr(0, 2));
                   return Status::Ok();
                 }).ok());
    EXPECT_EQ(names, (std::vector<std::string>{"0p", "1p", "2p", "3p", "4p", "5p", "n5"}));
  }
  const std::string snap = path + ".snap";
  EXPECT_EQ(ReplayAll().code(), StatusCode::kOk);
  // Moved: part 2's body where part 1's was.
  Sql("UPDATE snapshot_parts SET part = part + 10 WHERE seq = 5 AND part = 1;"
      "UPDATE snapshot_parts SET part = 1 WHERE seq = 5 AND part = 2;", snap);
  Status s = ReplayAll();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("snapshot at event 5: part 1 fails its checksum"), std::string::npos) << s.ToString();
  // Put back, then missing: the last part gone.
  Sql("UPDATE snapshot_parts SET part = 2 WHERE seq = 5 AND part = 1;"
      "UPDATE snapshot_parts SET part = 1 WHERE seq = 5 AND part = 11;", snap);
  EXPECT_EQ(ReplayAll().code(), StatusCode::kOk);
  Sql("DELETE FROM snapshot_parts WHERE seq = 5 AND part = 2", snap);
  s = ReplayAll();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("snapshot at event 5: part 2 of 3 is missing"), std::string::npos) << s.ToString();
  // Changed.
  Sql("UPDATE snapshot_parts SET body = replace(body, '0ppp', '9ppp') WHERE seq = 5 AND part = 0", snap);
  s = ReplayAll();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("snapshot at event 5: part 0 fails its checksum"), std::string::npos) << s.ToString();
}

// A read of the parts that fails (a damaged or unreadable file) reports the
// error, not a part missing: here a view in the table's place whose row
// fails as it is read (an integer overflow).
TEST_F(SqliteStoreTest, AFailedReadOfASnapshotPartIsReportedAsSuch) {
  FillWithSnapshot(3);
  Sql("DROP TABLE snapshot_parts;"
      "CREATE VIEW snapshot_parts AS SELECT 5 AS seq, 0 AS part, 'x' AS body, abs(-9223372036854775807 - 1) AS crc;",
      path + ".snap");
  Status s = ReplayAll();
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message().find("is missing"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("read snapshot: integer overflow"), std::string::npos) << s.ToString();
}

// A store written before snapshots had parts (the events in the snapshot's
// own record) still replays; and a server from before parts, which decodes
// the record's body as events, refuses a header instead of reading it as an
// empty state.
TEST_F(SqliteStoreTest, SnapshotsFromBeforePartsStillReadAndOldReadersRefuseTheNewOnes) {
  Fill();
  const std::string legacy = EncodeSnapshotBody({NodeAdded{Node("old-a")}, NodeAdded{Node("old-b")}});
  Sql("INSERT INTO snapshots (seq, body, crc) VALUES (4, '" + legacy + "', " + std::to_string(RecordCrc(4, legacy)) +
          ")",
      path + ".snap");
  Sql("DELETE FROM events WHERE seq <= 4");
  std::vector<std::string> names;
  auto s = SqliteStore::Open(path);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Replay([&](const Event& e) {
                 names.push_back(std::get<NodeAdded>(e).spec.name);
                 return Status::Ok();
               }).ok());
  EXPECT_EQ(names, (std::vector<std::string>{"old-a", "old-b", "n4"}));

  EXPECT_EQ(SnapshotParts(SnapshotHeader(3)), std::optional<int64_t>(3));
  EXPECT_EQ(SnapshotParts(legacy), std::nullopt);
  Status old_reader = DecodeSnapshotBody(SnapshotHeader(3), [](const Event&) { return Status::Ok(); });
  EXPECT_FALSE(old_reader.ok());
}

// The journal behind a snapshot is trimmed by the appends after it, a batch
// inside each one's transaction (the snapshot's own thread, at nice 19, never
// holds the journal's write lock); until then a replay skips it.
TEST_F(SqliteStoreTest, TheJournalBehindASnapshotIsTrimmedByTheAppendsAfterIt) {
  auto s = SqliteStore::Open(path);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_NO_FATAL_FAILURE(FillBehindSnapshot(**s, 5000));
  auto rows = [&] { return JournalRows(); };
  auto names = [&] {
    std::vector<std::string> out;
    EXPECT_TRUE((*s)->Replay([&](const Event& e) {
                   out.push_back(std::get<NodeAdded>(e).spec.name);
                   return Status::Ok();
                 }).ok());
    return out;
  };
  EXPECT_EQ(rows(), 5000);  // not yet: no append since
  EXPECT_EQ(names(), (std::vector<std::string>{"all"}));
  ASSERT_TRUE((*s)->Append({NodeAdded{Node("a")}}).ok());
  EXPECT_EQ(rows(), 5000 - 2000 + 1);  // one batch
  ASSERT_TRUE((*s)->Append({NodeAdded{Node("b")}}).ok());
  ASSERT_TRUE((*s)->Append({NodeAdded{Node("c")}}).ok());
  EXPECT_EQ(rows(), 3);  // all behind the snapshot gone: the three after it stay
  ASSERT_TRUE((*s)->Append({NodeAdded{Node("d")}}).ok());
  EXPECT_EQ(rows(), 4);
  EXPECT_EQ(names(), (std::vector<std::string>{"all", "a", "b", "c", "d"}));
  // And a reopened store replays the same.
  s->reset();
  s = SqliteStore::Open(path);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(names(), (std::vector<std::string>{"all", "a", "b", "c", "d"}));

  // A large append trims twice what it adds, so the trim keeps up; and a
  // store reopened before its appends trimmed (a crash) trims after it.
  std::vector<Event> more;
  for (int i = 0; i < 3000; ++i) more.push_back(NodeAdded{Node("m" + std::to_string(i))});
  ASSERT_TRUE((*s)->Append(more).ok());  // events 5005..8004
  ASSERT_TRUE((*s)->Append(more).ok());  // 8005..11004
  ASSERT_TRUE((*s)->WriteSnapshot(11004, [](const EventSink& sink) { return sink(NodeAdded{Node("later")}); }).ok());
  s->reset();
  s = SqliteStore::Open(path);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(rows(), 6004);
  ASSERT_TRUE((*s)->Append(more).ok());  // trims up to 6,000 of the 6,004 behind the snapshot
  EXPECT_EQ(rows(), 4 + 3000);
  ASSERT_TRUE((*s)->Append({NodeAdded{Node("e")}}).ok());
  EXPECT_EQ(rows(), 3001);
  EXPECT_EQ(names().size(), 1u + 3000 + 1);
}

// A trim that fails costs only itself: the append goes on without it, and
// a later one trims. A trigger refuses the DELETE: RAISE(ROLLBACK) undoes
// the append's whole transaction (it begins again), RAISE(ABORT) the
// statement alone.
TEST_F(SqliteStoreTest, AnAppendWhoseTrimFailsAppendsAllTheSame) {
  auto s = SqliteStore::Open(path);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_NO_FATAL_FAILURE(FillBehindSnapshot(**s, 5000));
  int64_t added = 0;
  for (const std::string mode : {"ROLLBACK", "ABORT"}) {
    SCOPED_TRACE(mode);
    Sql("CREATE TRIGGER refuse BEFORE DELETE ON events BEGIN SELECT RAISE(" + mode + ", 'refused'); END;");
    StatusOr<uint64_t> seq = (*s)->Append({NodeAdded{Node(mode)}});
    ASSERT_TRUE(seq.ok()) << seq.status().ToString();
    EXPECT_EQ(*seq, 5001u + static_cast<uint64_t>(added++));
    EXPECT_EQ(JournalRows(), 5000 + added);  // nothing trimmed, the event appended
    Sql("DROP TRIGGER refuse;");
  }
  ASSERT_TRUE((*s)->Append({NodeAdded{Node("after")}}).ok());
  EXPECT_EQ(JournalRows(), 5000 - 2000 + 3);  // the trim goes on where it stopped
  std::vector<std::string> names;
  ASSERT_TRUE((*s)->Replay([&](const Event& e) {
                    names.push_back(std::get<NodeAdded>(e).spec.name);
                    return Status::Ok();
                  }).ok());
  EXPECT_EQ(names, (std::vector<std::string>{"all", "ROLLBACK", "ABORT", "after"}));
}

TEST_F(SqliteStoreTest, ACorruptWalFrameFollowedByCommitsStopsTheOpen) {
  // Copy the database and its WAL aside while the store is open, as kill -9 leaves them.
  {
    auto s = SqliteStore::Open(path);
    ASSERT_TRUE(s.ok());
    for (int i = 0; i < 20; ++i) ASSERT_TRUE((*s)->Append({NodeAdded{Node("n" + std::to_string(i))}}).ok());
    std::filesystem::copy_file(path, dir + "/copy.db");
    std::filesystem::copy_file(path + "-wal", dir + "/copy.db-wal");
  }
  const std::string copy = dir + "/copy.db";
  ASSERT_GT(std::filesystem::file_size(copy + "-wal"), 32u + 3 * 4120u);
  EXPECT_TRUE(CheckWalFile(copy + "-wal").ok());
  {
    // Flip one byte in the page of the WAL's second frame.
    std::fstream f(copy + "-wal", std::ios::in | std::ios::out | std::ios::binary);
    char page_size_be[4];
    f.seekg(8);
    f.read(page_size_be, 4);
    const uint32_t page = (uint32_t(uint8_t(page_size_be[0])) << 24) | (uint32_t(uint8_t(page_size_be[1])) << 16) |
                          (uint32_t(uint8_t(page_size_be[2])) << 8) | uint8_t(page_size_be[3]);
    const std::streamoff at = 32 + (24 + page) + 24 + 100;
    f.seekg(at);
    char b;
    f.read(&b, 1);
    b = static_cast<char>(b ^ 0x5a);
    f.seekp(at);
    f.write(&b, 1);
  }
  auto opened = SqliteStore::Open(copy);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(opened.status().message().find("WAL frame 2 of"), std::string::npos) << opened.status().ToString();
  EXPECT_NE(opened.status().message().find("committed transaction(s) follow it"), std::string::npos);
}

TEST_F(SqliteStoreTest, AFullDiskRefusesTheWriteAndChangesNothing) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
  const std::string mnt = dir + "/small";
  std::filesystem::create_directories(mnt);
  if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=1m") != 0) GTEST_SKIP() << "cannot mount a tmpfs here";
  {
    auto s = SqliteStore::Open(mnt + "/rota.db");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_TRUE((*s)->Append({NodeAdded{Node("before")}}).ok());
    {
      std::ofstream fill(mnt + "/fill", std::ios::binary);
      std::string mb(1 << 20, 'x');
      fill.write(mb.data(), static_cast<std::streamsize>(mb.size()));
    }
    NodeSpec big = Node("big");
    big.labels["pad"] = std::string(200 * 1024, 'p');
    auto refused = (*s)->Append({NodeAdded{big}});
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kInsufficientStorage) << refused.status().ToString();
    EXPECT_EQ((*s)->last_seq(), 1u);
    std::filesystem::remove(mnt + "/fill");
    auto again = (*s)->Append({NodeAdded{Node("after")}});
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(*again, 2u);
  }
  std::vector<std::string> names;
  auto s = SqliteStore::Open(mnt + "/rota.db");
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Replay([&](const Event& e) {
                 if (auto* n = std::get_if<NodeAdded>(&e)) names.push_back(n->spec.name);
                 return Status::Ok();
               }).ok());
  EXPECT_EQ(names, (std::vector<std::string>{"before", "after"}));
  s->reset();
  umount(mnt.c_str());
}

// A VFS over the default one whose WAL files' next sync fails (EIO), as a
// failing disk's, or NFS's EDQUOT found only at the sync, would: the frames
// are written, the commit mark with them, but not known durable.
struct FailingWalSync {
  static inline std::atomic<int> armed{0};
  static inline sqlite3_vfs* base = nullptr;
  static inline sqlite3_vfs vfs{};
  static inline sqlite3_io_methods wal_methods{};
  static inline int (*real_sync)(sqlite3_file*, int) = nullptr;
  static int Sync(sqlite3_file* f, int flags) {
    if (armed.load() > 0) {
      armed.fetch_sub(1);
      return SQLITE_IOERR_FSYNC;
    }
    return real_sync(f, flags);
  }
  static int Open(sqlite3_vfs*, sqlite3_filename name, sqlite3_file* f, int flags, int* out_flags) {
    const int rc = base->xOpen(base, name, f, flags, out_flags);
    if (rc == SQLITE_OK && (flags & SQLITE_OPEN_WAL) != 0 && f->pMethods != nullptr) {
      if (real_sync == nullptr) {
        wal_methods = *f->pMethods;
        real_sync = wal_methods.xSync;
        wal_methods.xSync = Sync;
      }
      f->pMethods = &wal_methods;
    }
    return rc;
  }
  FailingWalSync() {
    base = sqlite3_vfs_find(nullptr);
    vfs = *base;
    vfs.zName = "rota-failing-wal-sync";
    vfs.xOpen = Open;
    sqlite3_vfs_register(&vfs, /*makeDflt=*/1);
  }
  ~FailingWalSync() {
    sqlite3_vfs_register(base, 1);
    sqlite3_vfs_unregister(&vfs);
  }
};

// A commit whose sync failed may be in the journal or not: its frames are in
// the WAL, which the next open's recovery may replay. The store says the
// outcome is unknown and takes no more writes (a later commit would build
// on a journal it cannot know); the next open goes on from what is there.
TEST_F(SqliteStoreTest, ACommitWhoseSyncFailedStopsTheWritesUntilARestart) {
  FailingWalSync failing;
  {
    auto s = SqliteStore::Open(path);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_TRUE((*s)->Append({NodeAdded{Node("before")}}).ok());
    FailingWalSync::armed = 1;
    auto unknown = (*s)->Append({NodeAdded{Node("unknown")}});
    FailingWalSync::armed = 0;
    ASSERT_FALSE(unknown.ok());
    EXPECT_EQ(unknown.status().code(), StatusCode::kUnavailable) << unknown.status().ToString();
    EXPECT_NE(unknown.status().message().find("the outcome of the commit of events 2..2 is unknown"), std::string::npos)
        << unknown.status().ToString();
    // Had the server died here, the journal would hold it: "not made" (the
    // answer before) would have been false.
    for (const char* ext : {"", "-wal"}) std::filesystem::copy_file(path + ext, dir + "/crashed" + ext);
    {
      auto crashed = SqliteStore::Open(dir + "/crashed");
      ASSERT_TRUE(crashed.ok()) << crashed.status().ToString();
      std::vector<std::string> names;
      ASSERT_TRUE((*crashed)->Replay([&](const Event& e) {
                     if (auto* n = std::get_if<NodeAdded>(&e)) names.push_back(n->spec.name);
                     return Status::Ok();
                   }).ok());
      EXPECT_EQ(names, (std::vector<std::string>{"before", "unknown"}));
    }
    auto refused = (*s)->Append({NodeAdded{Node("after")}});
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("restart the server"), std::string::npos) << refused.status().ToString();
  }
  auto s = SqliteStore::Open(path);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<std::string> names;
  ASSERT_TRUE((*s)->Replay([&](const Event& e) {
                 if (auto* n = std::get_if<NodeAdded>(&e)) names.push_back(n->spec.name);
                 return Status::Ok();
               }).ok());
  ASSERT_GE(names.size(), 1u);
  EXPECT_EQ(names[0], "before");
  EXPECT_EQ((*s)->last_seq(), names.size());
  auto next = (*s)->Append({NodeAdded{Node("next")}});
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(*next, names.size() + 1);
}

}  // namespace
}  // namespace rota

namespace rota {
namespace {

// A power loss can tear the last transaction (written, never synced, never
// acknowledged): a bad frame in it, even with its own commit frame after,
// is what SQLite recovers from, and the open goes ahead.
TEST(SqliteWal, ATornLastTransactionIsNotDataLoss) {
  char tmpl[] = "/tmp/rota-wal-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  {
    auto s = SqliteStore::Open(dir + "/rota.db");
    ASSERT_TRUE(s.ok());
    for (int i = 0; i < 5; ++i) {
      NodeSpec n{.name = "n" + std::to_string(i), .gpu_model = "H100", .gpus = 8, .cpu = 1000, .memory = 1024};
      ASSERT_TRUE((*s)->Append({NodeAdded{n}}).ok());
    }
    std::filesystem::copy_file(dir + "/rota.db-wal", dir + "/copy-wal");
  }
  std::fstream f(dir + "/copy-wal", std::ios::in | std::ios::out | std::ios::binary);
  auto be32 = [&](std::streamoff at) {
    unsigned char b[4];
    f.seekg(at);
    f.read(reinterpret_cast<char*>(b), 4);
    return (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | b[3];
  };
  const uint32_t page = be32(8);
  f.seekg(0, std::ios::end);
  const auto frames = static_cast<size_t>((static_cast<std::streamoff>(f.tellg()) - 32) / (24 + page));
  // The commit frames (nonzero "database size" field), in order.
  std::vector<size_t> commits;
  for (size_t i = 0; i < frames; ++i) {
    if (be32(32 + static_cast<std::streamoff>(i * (24 + page)) + 4) != 0) commits.push_back(i);
  }
  ASSERT_GE(commits.size(), 2u);
  // Corrupt the first frame of the last transaction.
  const size_t first_of_last = commits[commits.size() - 2] + 1;
  const std::streamoff at = 32 + static_cast<std::streamoff>(first_of_last * (24 + page)) + 24 + 10;
  f.seekg(at);
  char b;
  f.read(&b, 1);
  b = static_cast<char>(b ^ 0x33);
  f.seekp(at);
  f.write(&b, 1);
  f.close();
  EXPECT_TRUE(CheckWalFile(dir + "/copy-wal").ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace rota
