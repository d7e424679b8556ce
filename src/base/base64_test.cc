#include "base/base64.h"

#include <gtest/gtest.h>

namespace rota {
namespace {

TEST(Base64, RoundTripsBytesAndRejectsGarbage) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  for (size_t n = 0; n < 8; ++n) EXPECT_EQ(Base64Decode(Base64Encode(all.substr(n))), all.substr(n)) << n;
  EXPECT_FALSE(Base64Decode("Zg=").has_value());
  EXPECT_FALSE(Base64Decode("Z===").has_value());
  EXPECT_FALSE(Base64Decode("Zg=a").has_value());
  EXPECT_FALSE(Base64Decode("Z!==").has_value());
}

}  // namespace
}  // namespace rota
