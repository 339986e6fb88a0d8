#include "pickle_reader.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

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

// Found converting public snapshots: PyTorch wrote a Python frame's line as 2^64 - 1, a LONG1
// of 9 bytes, and the reader refused the whole snapshot. An int wider than 64 bits is now a
// kBigInt (its value not kept), unless its extra bytes only repeat the sign.
TEST(PickleReader, IntegersWiderThan64BitsAreKeptAsBigInts) {
  // LONG1 / LONG4 operands: the width, then the bytes, little-endian.
  const auto wide = [](std::size_t width_bytes, std::size_t width, unsigned char fill,
                       std::vector<std::pair<std::size_t, unsigned char>> set) {
    std::string operand;
    for (std::size_t i = 0; i < width_bytes; ++i) {
      operand.push_back(static_cast<char>((width >> (8 * i)) & 0xff));
    }
    std::string bytes(width, static_cast<char>(fill));
    for (auto [at, byte] : set) bytes[at] = static_cast<char>(byte);
    operand.append(bytes);
    return operand;
  };
  PickleBuilder b;
  b.empty_list().mark();
  b.op('\x8a').raw(wide(1, 9, 0xff, {{8, 0x00}}));                         // 2^64 - 1
  b.op('\x8a').raw(wide(1, 9, 0xff, {}));                                  // -1, one byte longer
  b.op('\x8a').raw(wide(1, 9, 0x00, {{0, 0x05}}));                         // 5, one byte longer
  b.op('\x8a').raw(wide(1, 10, 0x00, {{7, 0x80}, {8, 0xff}, {9, 0xff}}));  // -2^63
  b.op('\x8a').raw(wide(1, 10, 0x00, {{7, 0x80}}));                        // 2^63
  b.op('\x8b').raw(wide(4, 12, 0x00, {{11, 0x01}}));                       // 2^88
  b.op('\x8b').raw(wide(4, 16, 0xff, {}));                                 // -1
  b.appends().stop();
  const PickleRef root = parse_pickle(b.bytes(), "x.pickle");
  ASSERT_EQ(root->items.size(), 7u);
  EXPECT_EQ(root->items[0]->kind, PickleValue::Kind::kBigInt);
  ASSERT_EQ(root->items[1]->kind, PickleValue::Kind::kInt);
  EXPECT_EQ(root->items[1]->integer, -1);
  ASSERT_EQ(root->items[2]->kind, PickleValue::Kind::kInt);
  EXPECT_EQ(root->items[2]->integer, 5);
  ASSERT_EQ(root->items[3]->kind, PickleValue::Kind::kInt);
  EXPECT_EQ(root->items[3]->integer, INT64_MIN);
  EXPECT_EQ(root->items[4]->kind, PickleValue::Kind::kBigInt);
  EXPECT_EQ(root->items[5]->kind, PickleValue::Kind::kBigInt);
  ASSERT_EQ(root->items[6]->kind, PickleValue::Kind::kInt);
  EXPECT_EQ(root->items[6]->integer, -1);
  EXPECT_STREQ(kind_name(root->items[0]->kind), "int of more than 64 bits");
  // Cut short, a wide one is a truncation like any other.
  PickleBuilder cut;
  cut.op('\x8a').raw("\x09\xff\xff");
  EXPECT_NE(error_of(cut.bytes()).find("truncated input"), std::string::npos)
      << error_of(cut.bytes());
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
  // A list nested 250,000 levels deep: built and freed without recursion (a recursive free
  // would need tens of MiB of stack). Much deeper, it passes the reader's memory limit.
  constexpr std::size_t kDepth = 250'000;
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

// Note [Memory of a hostile pickle]: values that cannot change are made once per pickle.
TEST(PickleReader, UnchangingValuesAreShared) {
  // [None, None, True, True, False, 7, 7, (), (), "", ""]
  const std::string bytes =
      std::string("\x80\x04(NN\x88\x88\x89K\x07K\x07))", 14) + std::string("\x8c\x00\x8c\x00l.", 6);
  const PickleRef root = parse_pickle(bytes, "x.pickle");
  ASSERT_EQ(root->items.size(), 11u);
  const auto& items = root->items;
  EXPECT_EQ(items[0]->kind, PickleValue::Kind::kNone);
  EXPECT_EQ(items[0].get(), items[1].get());
  EXPECT_TRUE(items[2]->boolean);
  EXPECT_EQ(items[2].get(), items[3].get());
  EXPECT_FALSE(items[4]->boolean);
  EXPECT_NE(items[4].get(), items[2].get());
  EXPECT_EQ(items[5]->integer, 7);
  EXPECT_EQ(items[5].get(), items[6].get());
  EXPECT_EQ(items[7]->kind, PickleValue::Kind::kTuple);
  EXPECT_TRUE(items[7]->items.empty());
  EXPECT_EQ(items[7].get(), items[8].get());
  EXPECT_EQ(items[9]->kind, PickleValue::Kind::kString);
  EXPECT_EQ(items[9]->text, "");
  EXPECT_EQ(items[9].get(), items[10].get());
  // Lists and dicts can change, so each is its own.
  const PickleRef lists = parse_pickle(std::string("\x80\x04]]\x86.", 6), "x.pickle");
  ASSERT_EQ(lists->items.size(), 2u);
  EXPECT_NE(lists->items[0].get(), lists->items[1].get());
}

TEST(PickleReader, AHostilePickleIsRefusedBeforeItsMemoryIsSpent) {
  // One EMPTY_LIST per byte: each list costs about 230 bytes, so a 1 MiB file would need about
  // 230 MiB. Reading stops at the limit (64 MiB for a file this small), naming it.
  std::string bytes = "\x80\x04";
  bytes.append(std::size_t{1} << 20, ']');
  bytes += '.';
  const std::string error = error_of(bytes);
  EXPECT_NE(error.find("more than 64 MiB of memory (64 x its size)"), std::string::npos) << error;
  EXPECT_NE(error.find("is not one"), std::string::npos) << error;
  // A million None in one list costs a reference each, within the limit (made one by one,
  // as before the limit, they would pass it).
  std::string nones = "\x80\x04(";
  nones.append(1'000'000, 'N');
  nones += "l.";
  EXPECT_EQ(parse_pickle(nones, "x.pickle")->items.size(), 1'000'000u);
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
