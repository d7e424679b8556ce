#include "base/status.h"

#include <gtest/gtest.h>

namespace rota {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgumentError("odd: " + std::to_string(x));
  return x / 2;
}

Status Quarter(int x, int* out) {
  ROTA_ASSIGN_OR_RETURN(int h, Half(x));
  ROTA_ASSIGN_OR_RETURN(*out, Half(h));
  return Status::Ok();
}

TEST(Status, OkCarriesNoMessage) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(Status, ErrorKeepsCodeMessageAndPrefix) {
  Status s = NotFoundError("job 7");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.ToString(), "NotFound: job 7");
  EXPECT_EQ(s.WithPrefix("cancel").message(), "cancel: job 7");
  Status copy = s;
  EXPECT_EQ(copy, s);
}

TEST(StatusOr, PropagatesThroughMacros) {
  int out = 0;
  EXPECT_TRUE(Quarter(8, &out).ok());
  EXPECT_EQ(out, 2);
  Status bad = Quarter(6, &out);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message(), "odd: 3");
}

TEST(StatusOr, OkStatusIsNotAValue) {
  StatusOr<int> v = Status::Ok();
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace rota
