#include "server/log_read.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace rota::server {
namespace {

class LogReadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/rota-log-read-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string File(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::string dir_;
};

TEST_F(LogReadTest, AnswersAsTheWholeTextWouldBeCut) {
  // Two files read as one: the local log, then one shipped from a node.
  const std::vector<std::string> files = {File("a.log", "one\ntwo\nthr"), File("b.log", "ee\nfour\n"), dir_ + "/none.log"};
  const std::string whole = "one\ntwo\nthree\nfour\n";
  LogRead r = ReadLog(files, 0, 0, 1 << 20);
  EXPECT_EQ(r.text, whole);
  EXPECT_EQ(r.size, whole.size());
  EXPECT_FALSE(r.cut);
  EXPECT_EQ(ReadLog(files, 4, 0, 1 << 20).text, "two\nthree\nfour\n");
  EXPECT_EQ(ReadLog(files, whole.size(), 0, 1 << 20).text, "");
  EXPECT_EQ(ReadLog(files, whole.size() + 1, 0, 1 << 20).text, whole);  // (it started over)
  // The last lines: the final newline is not a line of its own.
  EXPECT_EQ(ReadLog(files, 0, 1, 1 << 20).text, "four\n");
  EXPECT_EQ(ReadLog(files, 0, 2, 1 << 20).text, "three\nfour\n");  // across the files
  EXPECT_EQ(ReadLog(files, 0, 9, 1 << 20).text, whole);
  EXPECT_EQ(ReadLog(files, 10, 9, 1 << 20).text, "ree\nfour\n");  // within what is after the offset
  EXPECT_EQ(ReadLog({File("c.log", "x\ny")}, 0, 1, 1 << 20).text, "y");  // (a last line without its newline)
  // At most `cap` bytes: the end of what was asked for.
  r = ReadLog(files, 0, 0, 5);
  EXPECT_EQ(r.text, "four\n");
  EXPECT_TRUE(r.cut);
  r = ReadLog(files, 0, 2, 7);
  EXPECT_EQ(r.text, "e\nfour\n");
  EXPECT_TRUE(r.cut);
  EXPECT_FALSE(ReadLog(files, 0, 1, 5).cut);
}

TEST_F(LogReadTest, ASparseLogOfGigabytesIsReadOnlyWhereTheAnswerIsFromFewChunks) {
  // 4 GiB that take no disk (a task can ftruncate its own log).
  const std::string path = File("big.log", "");
  ASSERT_EQ(truncate(path.c_str(), off_t{4} << 30), 0);
  { std::ofstream(path, std::ios::binary | std::ios::app) << "\nlast line\n"; }
  LogRead r = ReadLog({path}, 0, 1, 8 << 20);
  EXPECT_EQ(r.text, "last line\n");
  EXPECT_EQ(r.size, (uint64_t{4} << 30) + 11);
  r = ReadLog({path}, 0, 0, 1 << 20);
  EXPECT_EQ(r.text.size(), size_t{1} << 20);
  EXPECT_TRUE(r.cut);
  // A tail of NULs (no newline within the cap) is the cap's worth.
  r = ReadLog({path}, 0, 3, 1 << 20);
  EXPECT_EQ(r.text.size(), size_t{1} << 20);
  EXPECT_TRUE(r.cut);
}

}  // namespace
}  // namespace rota::server
