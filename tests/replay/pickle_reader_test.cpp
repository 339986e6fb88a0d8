#include "pickle_reader.h"

#include <gtest/gtest.h>

#include "pickle_builder.h"

namespace cudacache::replay {
namespace {

using testing::PickleBuilder;

std::string error_of(const std::string& bytes) {
  try {
    parse_pickle(bytes, "x.pickle");
  } catch (const PickleError& error) {
    return error.what();
  }
  return "(no error)";
}

TEST(PickleReader, ReadsPlainData) {
  // {"a": [1, -2, 300000, None, True, False, 2.5, (7, "s")], "b": <memo of the list>}
  PickleBuilder b;
  b.empty_dict().memoize().mark();
  b.str("a").empty_list().memoize().mark();
  b.op('K').raw("\x01");                              // BININT1 1
  b.op('J').raw("\xfe\xff\xff\xff");                  // BININT -2
  b.op('J').raw(std::string("\xe0\x93\x04\x00", 4));  // BININT 300000
  b.none().boolean(true).boolean(false);
  b.op('G').raw(std::string("\x40\x04\x00\x00\x00\x00\x00\x00", 8));  // BINFLOAT 2.5
  b.op('K').raw("\x07").str("s").op('\x86');                          // TUPLE2
  b.appends();
  b.str("b").op('h').raw("\x01");  // BINGET 1: the list again
  b.set_items().stop();
  const PickleRef root = parse_pickle(b.bytes(), "x.pickle");
  ASSERT_TRUE(root->is_dict());
  const PickleValue* a = root->find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->items.size(), 8u);
  EXPECT_EQ(a->items[0]->integer, 1);
  EXPECT_EQ(a->items[1]->integer, -2);
  EXPECT_EQ(a->items[2]->integer, 300000);
  EXPECT_EQ(a->items[3]->kind, PickleValue::Kind::kNone);
  EXPECT_TRUE(a->items[4]->boolean);
  EXPECT_FALSE(a->items[5]->boolean);
  EXPECT_DOUBLE_EQ(a->items[6]->real, 2.5);
  ASSERT_EQ(a->items[7]->kind, PickleValue::Kind::kTuple);
  EXPECT_EQ(a->items[7]->items[1]->text, "s");
  EXPECT_EQ(root->find("b"), a);  // the memo shares one object
  EXPECT_EQ(root->find("missing"), nullptr);
}

TEST(PickleReader, ReadsLongIntegersOfEveryWidth) {
  PickleBuilder b;
  b.empty_list().mark();
  b.integer(140050562023424);                        // a device address, as PyTorch writes it
  b.op('\x8a').raw(std::string("\x01\xff", 2));      // LONG1 1 byte: -1
  b.op('\x8a').raw(std::string("\x02\x00\x80", 3));  // LONG1 2 bytes: -32768
  b.op('\x8a').raw(std::string("\x00", 1));          // LONG1 0 bytes: 0
  b.appends().stop();
  const PickleRef root = parse_pickle(b.bytes(), "x.pickle");
  ASSERT_EQ(root->items.size(), 4u);
  EXPECT_EQ(root->items[0]->integer, 140050562023424);
  EXPECT_EQ(root->items[1]->integer, -1);
  EXPECT_EQ(root->items[2]->integer, -32768);
  EXPECT_EQ(root->items[3]->integer, 0);
}

TEST(PickleReader, SkipsFrames) {
  PickleBuilder b;
  b.op('\x95').raw(std::string("\x03\x00\x00\x00\x00\x00\x00\x00", 8)).op('K').raw("\x05").stop();
  EXPECT_EQ(parse_pickle(b.bytes(), "x.pickle")->integer, 5);
}

TEST(PickleReader, RejectsGlobalWithItsOffset) {
  PickleBuilder b;
  b.op('c').raw("os\nsystem\n").stop();
  const std::string message = error_of(b.bytes());
  EXPECT_NE(message.find("x.pickle: byte offset 2:"), std::string::npos) << message;
  EXPECT_NE(message.find("unexpected type"), std::string::npos) << message;
  EXPECT_NE(message.find("GLOBAL"), std::string::npos) << message;
}

TEST(PickleReader, RejectsEveryObjectBuildingOpcode) {
  const std::pair<char, const char*> opcodes[] = {{'\x93', "STACK_GLOBAL"},
                                                  {'R', "REDUCE"},
                                                  {'b', "BUILD"},
                                                  {'i', "INST"},
                                                  {'o', "OBJ"},
                                                  {'\x81', "NEWOBJ"},
                                                  {'\x92', "NEWOBJ_EX"},
                                                  {'\x82', "EXT1"},
                                                  {'Q', "BINPERSID"}};
  for (auto [opcode, name] : opcodes) {
    PickleBuilder b;
    b.none().none().op(opcode).stop();
    const std::string message = error_of(b.bytes());
    EXPECT_NE(message.find("byte offset 4: unexpected type: opcode " + std::string(name)),
              std::string::npos)
        << message;
  }
}

TEST(PickleReader, RejectsUnknownOpcodes) {
  PickleBuilder b;
  b.op('I').raw("12\n").stop();  // protocol 0 INT: not a protocol 2..5 opcode
  const std::string message = error_of(b.bytes());
  EXPECT_NE(message.find("byte offset 2: unsupported opcode 0x49"), std::string::npos) << message;
}

TEST(PickleReader, RejectsNewerProtocols) {
  EXPECT_NE(error_of(std::string("\x80\x06N.", 4)).find("unsupported pickle protocol 6"),
            std::string::npos);
}

TEST(PickleReader, EveryTruncationIsAnErrorWithAnOffset) {
  PickleBuilder b;
  b.empty_dict().memoize().mark().key_int("addr", 140050562023424).key_str("action", "alloc");
  b.str("list").empty_list().mark().integer(1).integer(2).appends().set_items().stop();
  const std::string& whole = b.bytes();
  ASSERT_TRUE(parse_pickle(whole, "x.pickle")->is_dict());
  for (std::size_t length = 0; length < whole.size(); ++length) {
    const std::string message = error_of(whole.substr(0, length));
    EXPECT_NE(message.find("byte offset "), std::string::npos)
        << "length " << length << ": " << message;
    EXPECT_NE(message.find("truncated"), std::string::npos)
        << "length " << length << ": " << message;
  }
}

TEST(PickleReader, TruncatedStringNamesWhereItStarts) {
  const std::string message =
      error_of(std::string("\x80\x04\x8c\x10"
                           "abc",
                           7));
  EXPECT_NE(message.find("byte offset 2: truncated input"), std::string::npos) << message;
}

TEST(PickleReader, StructuralErrors) {
  EXPECT_NE(error_of(std::string("\x80\x04h\x05.", 5)).find("memo key 5 was never stored"),
            std::string::npos);
  EXPECT_NE(error_of(std::string("\x80\x04.", 3)).find("STOP with an empty stack"),
            std::string::npos);
  EXPECT_NE(error_of(std::string("\x80\x04Ne.", 5)).find("no MARK"), std::string::npos);
  EXPECT_NE(error_of(std::string("\x80\x04]KaKba.", 9)).find("APPEND on a int"), std::string::npos);
  EXPECT_NE(error_of(std::string("\x80\x04}(Nu.", 7)).find("odd number"), std::string::npos);
  EXPECT_NE(error_of(std::string("\x80\x04"
                                 "a.",
                                 4))
                .find("stack underflow"),
            std::string::npos);
}

TEST(PickleReader, DeepNestingNeitherCrashesNorLeaks) {
  // A list nested a million levels deep: built and freed without recursion.
  constexpr std::size_t kDepth = 1'000'000;
  std::string bytes = "\x80\x04";
  bytes.append(kDepth, ']');
  bytes.append(kDepth - 1, 'a');
  bytes += '.';
  const PickleRef root = parse_pickle(bytes, "deep.pickle");
  std::size_t depth = 1;
  for (const PickleValue* value = root.get(); !value->items.empty(); value = value->items[0].get())
    ++depth;
  EXPECT_EQ(depth, kDepth);
}

// Found by fuzz_snapshot_pickle: through the memo a list could be appended to itself, a cycle
// that shared_ptr never frees (LeakSanitizer saw it). Now an error, and nothing leaks.
TEST(PickleReader, AContainerInsideItselfIsAnError) {
  // EMPTY_LIST, BINPUT 0, BINGET 0, APPEND: the list inside itself.
  EXPECT_NE(error_of(std::string("\x80\x04]q\x00h\x00"
                                 "a.",
                                 9))
                .find("contains itself"),
            std::string::npos);
  // Through a list and a tuple: d = {}; d["k"] = [(d,)].
  EXPECT_NE(error_of(std::string("\x80\x04}q\x00X\x01\x00\x00\x00k]h\x00\x85"
                                 "as.",
                                 18))
                .find("contains itself"),
            std::string::npos);
  // Shared, not cyclic: one list in two places is plain data.
  const PickleRef root = parse_pickle(std::string("\x80\x04]q\x00h\x00\x86.", 9), "x.pickle");
  ASSERT_EQ(root->items.size(), 2u);
  EXPECT_EQ(root->items[0].get(), root->items[1].get());
}

TEST(PickleReader, RecognisesPickles) {
  EXPECT_TRUE(looks_like_pickle(std::string("\x80\x04", 2)));
  EXPECT_FALSE(looks_like_pickle("op,id,size,stream\n"));
  EXPECT_FALSE(looks_like_pickle(""));
}

}  // namespace
}  // namespace cudacache::replay
