#include "api/server_list.h"

#include <gtest/gtest.h>

namespace rota::api {
namespace {

TEST(ServerList, ParsesTrimsAndDefaults) {
  ServerList s(" http://a:1/ ,, http://b:2,http://a:1");
  EXPECT_EQ(s.all(), (std::vector<std::string>{"http://a:1", "http://b:2"}));
  EXPECT_EQ(s.current(), "http://a:1");
  EXPECT_EQ(ServerList("").current(), "http://127.0.0.1:7070");
}

TEST(ServerList, MovesOnOnceForOneFailureSeenByTwoThreads) {
  ServerList s("http://a:1,http://b:2,http://c:3");
  const std::string tried = s.current();
  s.Failed(tried);
  s.Failed(tried);  // a second caller that tried the same one: no second move
  EXPECT_EQ(s.current(), "http://b:2");
  s.Failed("http://b:2");
  s.Failed("http://c:3");
  EXPECT_EQ(s.current(), "http://a:1");  // round again
}

TEST(ServerList, GoesWhereAStandbySaysTheLeaderIs) {
  ServerList s("http://a:1,http://b:2");
  s.Redirect("http://b:2");
  EXPECT_EQ(s.current(), "http://b:2");
  s.Redirect("http://d:4/");  // not listed: it joins
  EXPECT_EQ(s.current(), "http://d:4");
  EXPECT_EQ(s.size(), 3u);
  s.Redirect("");
  EXPECT_EQ(s.current(), "http://d:4");
}

TEST(ServerList, HeardMovesOnNoAnswerAndFollowsAStandby) {
  ServerList s("http://a:1,http://b:2");
  s.Heard("http://a:1", 200, "", "");
  EXPECT_EQ(s.current(), "http://a:1");
  s.Heard("http://a:1", 503, "", "");  // a leader that cannot write: it stays the one
  EXPECT_EQ(s.current(), "http://a:1");
  s.Heard("http://a:1", 0, "", "");
  EXPECT_EQ(s.current(), "http://b:2");
  s.Heard("http://b:2", 503, "standby", "http://c:3");
  EXPECT_EQ(s.current(), "http://c:3");
}

TEST(ServerList, AStandbyThatKnowsNoLeaderSendsTheClientOnWithoutMarkingItFailed) {
  ServerList s("http://a:1,http://b:2");
  s.Heard("http://a:1", 503, "standby", "");  // between leaders: try the other
  EXPECT_EQ(s.current(), "http://b:2");
  s.Heard("http://b:2", 503, "standby", "");
  EXPECT_EQ(s.current(), "http://a:1");
  s.Redirect("http://b:2");  // b won the election: not skipped as failed
  EXPECT_EQ(s.current(), "http://b:2");
}

TEST(ServerList, DoesNotGoBackToALeaderThatJustFailed) {
  ServerList s("http://a:1,http://b:2,http://c:3");
  s.Failed("http://a:1");         // the leader stopped answering
  EXPECT_EQ(s.current(), "http://b:2");
  s.Redirect("http://a:1");       // b has not noticed yet: a stale answer
  EXPECT_EQ(s.current(), "http://b:2");
  s.Failed("http://b:2");
  s.Redirect("http://a:1");
  EXPECT_EQ(s.current(), "http://c:3");
  s.Redirect("http://d:4");       // c names the new leader
  EXPECT_EQ(s.current(), "http://d:4");
}

}  // namespace
}  // namespace rota::api
