// utf8.h and the JSON writer built on it: valid UTF-8 passes through, every byte that a strict
// reader (Python's json) would refuse is escaped as \u00XX, so that a name in another encoding
// still gives a document every reader loads.
#include "utf8.h"
#include "json_writer.h"

#include <gtest/gtest.h>

#include <string>

namespace cudacache {
namespace {

TEST(Utf8, ValidSequencesHaveTheirLength) {
  EXPECT_EQ(utf8_sequence_length("a", 0), 1u);
  EXPECT_EQ(utf8_sequence_length("\xc3\xa9", 0), 2u);          // é
  EXPECT_EQ(utf8_sequence_length("\xe2\x82\xac", 0), 3u);      // €
  EXPECT_EQ(utf8_sequence_length("\xf0\x9f\x98\x80", 0), 4u);  // U+1F600
  EXPECT_EQ(utf8_sequence_length("\xf4\x8f\xbf\xbf", 0), 4u);  // U+10FFFF, the last
  EXPECT_EQ(utf8_sequence_length("\xed\x9f\xbf", 0), 3u);      // U+D7FF, before the surrogates
}

TEST(Utf8, WhatStrictReadersRefuseIsNoSequence) {
  for (const char* bad :
       {"\xe9", "\x80", "\xc0\x80", "\xc1\xbf", "\xe0\x80\x80", "\xed\xa0\x80", "\xf0\x80\x80\x80",
        "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xc3", "\xe2\x82", "\xe2\x28\xa1"}) {
    EXPECT_EQ(utf8_sequence_length(bad, 0), 0u) << testing::PrintToString(std::string(bad));
  }
}

TEST(Utf8, TheJsonWriterEscapesWhatIsNotUtf8) {
  JsonWriter out;
  out.value(std::string("caf\xe9 \xc3\xa9 \"q\" \\ \x01 \xe2\x82\xac \xed\xa0\x80"));
  EXPECT_EQ(out.str(),
            "\"caf\\u00e9 \xc3\xa9 \\\"q\\\" \\\\ \\u0001 \xe2\x82\xac \\u00ed\\u00a0\\u0080\"");
}

}  // namespace
}  // namespace cudacache
