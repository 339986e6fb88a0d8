#include "snprintf_copy.h"

#include <gtest/gtest.h>

#include <climits>
#include <string>

namespace cudacache {
namespace {

TEST(SnprintfCopy, CopiesWhatFitsAndReturnsTheFullLength) {
  std::string error;
  char buf[4] = {'x', 'x', 'x', 'x'};
  EXPECT_EQ(snprintf_copy("abcdef", buf, sizeof(buf), &error), 6);
  EXPECT_STREQ(buf, "abc");
  EXPECT_EQ(snprintf_copy("abcdef", nullptr, 0, &error), 6);
  EXPECT_EQ(snprintf_copy("ab", buf, sizeof(buf), &error), 2);
  EXPECT_STREQ(buf, "ab");
  EXPECT_TRUE(error.empty()) << error;
}

TEST(SnprintfCopy, RefusesANullBufferWithALength) {
  std::string error;
  EXPECT_EQ(snprintf_copy("abc", nullptr, 16, &error), -1);
  EXPECT_NE(error.find("buf is NULL but len is 16"), std::string::npos) << error;
}

// Found in review: a history of 100 M entries made a snapshot of 2.27 GB, returned as
// -2026966864 with no error (and past 4 GiB as a small positive length: a truncated document).
TEST(SnprintfCopy, RefusesADocumentLongerThanAnIntCanCount) {
  std::string error;
  EXPECT_EQ(snprintf_length(static_cast<std::size_t>(INT_MAX) + 1, &error), -1);
  EXPECT_NE(error.find("2147483648 bytes"), std::string::npos) << error;
  error.clear();
  EXPECT_EQ(snprintf_length(std::size_t{1} << 32, &error), -1);  // would wrap to 0
  EXPECT_NE(error.find("4294967296 bytes"), std::string::npos) << error;
  error.clear();
  EXPECT_EQ(snprintf_length(static_cast<std::size_t>(INT_MAX), &error), INT_MAX);
  EXPECT_TRUE(error.empty()) << error;
}

}  // namespace
}  // namespace cudacache
