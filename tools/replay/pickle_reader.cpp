#include "pickle_reader.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <unordered_map>

namespace cudacache::replay {
namespace {

// Opcodes of pickle protocols 2..5 (Lib/pickletools.py names them).
enum Opcode : unsigned char {
  kMark = '(',
  kStop = '.',
  kPop = '0',
  kPopMark = '1',
  kDup = '2',
  kBinInt = 'J',
  kBinInt1 = 'K',
  kBinInt2 = 'M',
  kNone = 'N',
  kBinUnicode = 'X',
  kBinBytes = 'B',
  kShortBinBytes = 'C',
  kBinFloat = 'G',
  kAppend = 'a',
  kAppends = 'e',
  kDict = 'd',
  kEmptyDict = '}',
  kList = 'l',
  kEmptyList = ']',
  kSetItem = 's',
  kSetItems = 'u',
  kTuple = 't',
  kEmptyTuple = ')',
  kBinGet = 'h',
  kLongBinGet = 'j',
  kBinPut = 'q',
  kLongBinPut = 'r',
  kProto = 0x80,
  kTuple1 = 0x85,
  kTuple2 = 0x86,
  kTuple3 = 0x87,
  kNewTrue = 0x88,
  kNewFalse = 0x89,
  kLong1 = 0x8a,
  kLong4 = 0x8b,
  kShortBinUnicode = 0x8c,
  kBinUnicode8 = 0x8d,
  kBinBytes8 = 0x8e,
  kMemoize = 0x94,
  kFrame = 0x95,
};

// Opcodes that import, call or build arbitrary Python objects: never accepted.
const char* object_opcode_name(unsigned char op) {
  switch (op) {
    case 'c': return "GLOBAL";
    case 0x93: return "STACK_GLOBAL";
    case 'R': return "REDUCE";
    case 'b': return "BUILD";
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 0x81: return "NEWOBJ";
    case 0x92: return "NEWOBJ_EX";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    default: return nullptr;
  }
}

constexpr int kHighestProtocol = 5;

// Note [Memory of a hostile pickle]: most opcodes are one or two bytes, and each could make a
// value of about 150 bytes, so a pickle of nothing but EMPTY_LIST or NONE opcodes needed about
// 150 x its size to read (a 100 MB file, 15 GB). So None, True, False, the empty tuple and
// string, and the integers 0-255 (BININT1) are made once per pickle and shared (they cannot
// change), and what the reader holds is counted as it is made: past kMemoryPerInputByte x the
// input's size (or kMemoryFloor, for small inputs), reading stops with an error that says so.
// PyTorch's snapshots need a quarter of that or less: counted so, the 11 of
// ../shared/traces/raw need 7.0 to 16.4 x their size (many small dicts and integers).
constexpr std::size_t kMemoryPerInputByte = 64;
constexpr std::size_t kMemoryFloor = std::size_t{64} << 20;
// What is counted: a value with its control block and one reference to it; a list or dict
// also has its place in containers_ and in refuse_cycles' marks; a memo entry; a reference
// pushed by DUP or a memo get.
constexpr std::size_t kValueBytes = sizeof(PickleValue) + 48;
constexpr std::size_t kContainerBytes = 80;
constexpr std::size_t kMemoEntryBytes = 64;
constexpr std::size_t kReferenceBytes = sizeof(PickleRef);

class Reader {
 public:
  Reader(std::string_view bytes, const std::string& source)
      : bytes_(bytes),
        source_(source),
        memory_limit_(std::max(kMemoryFloor, bytes.size() * kMemoryPerInputByte)) {}
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;
  // After a failure the values may form cycles (see refuse_cycles), which shared_ptr never
  // frees: emptying every list and dict breaks them all.
  ~Reader() {
    for (const PickleRef& container : containers_) {
      container->items.clear();
      container->entries.clear();
    }
  }

  PickleRef run() {
    // A snapshot is protocol 2 or later, which starts with PROTO. Anything else (a CSV, a text
    // file) would be read as opcodes and refused for the first byte that is not one it takes.
    if (!bytes_.empty() && static_cast<unsigned char>(bytes_[0]) != kProto) {
      fail("not a snapshot pickle (protocol 2 or later starts with 0x80)");
    }
    while (true) {
      if (pos_ >= bytes_.size()) {
        offset_ = pos_;
        fail("truncated input: the data ends without a STOP opcode");
      }
      offset_ = pos_;
      unsigned char op = static_cast<unsigned char>(bytes_[pos_++]);
      if (op == kStop) {
        if (stack_.empty()) fail("STOP with an empty stack");
        refuse_cycles();
        containers_.clear();  // parsed: the values own each other, without cycles
        return stack_.back();
      }
      step(op);
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw PickleError(source_ + ": byte offset " + std::to_string(offset_) + ": " + what);
  }

  std::string_view take(std::size_t count) {
    if (count > bytes_.size() - pos_) {
      fail("truncated input: opcode needs " + std::to_string(count) + " more bytes, only " +
           std::to_string(bytes_.size() - pos_) + " left");
    }
    std::string_view out = bytes_.substr(pos_, count);
    pos_ += count;
    return out;
  }

  std::uint64_t take_unsigned_le(std::size_t width) { return unsigned_le(take(width)); }
  // The first 8 bytes (at most) of `raw`, little-endian.
  static std::uint64_t unsigned_le(std::string_view raw) {
    std::uint64_t value = 0;
    for (std::size_t i = 0; i < raw.size() && i < 8; ++i) {
      value |= std::uint64_t{static_cast<unsigned char>(raw[i])} << (8 * i);
    }
    return value;
  }

  std::size_t take_length(std::size_t width) {
    std::uint64_t length = take_unsigned_le(width);
    if (length > bytes_.size() - pos_) {
      fail("truncated input: length " + std::to_string(length) + " runs past the end of the data");
    }
    return static_cast<std::size_t>(length);
  }

  // See Note [Memory of a hostile pickle].
  void charge(std::size_t bytes) {
    memory_ += bytes;
    if (memory_ > memory_limit_) {
      fail("reading this pickle would take more than " + std::to_string(memory_limit_ >> 20) +
           " MiB of memory (" + std::to_string(kMemoryPerInputByte) +
           " x its size): a PyTorch snapshot needs far less, so it is not one");
    }
  }

  PickleRef make(PickleValue::Kind kind) {
    const bool container = kind == PickleValue::Kind::kList || kind == PickleValue::Kind::kDict;
    charge(kValueBytes + (container ? kContainerBytes : 0));
    auto value = std::make_shared<PickleValue>();
    value->kind = kind;
    if (container) containers_.push_back(value);
    return value;
  }

  // A value that cannot change, made once and shared (Note [Memory of a hostile pickle]).
  PickleRef shared(PickleRef& slot, PickleValue::Kind kind) {
    if (slot == nullptr) slot = make(kind);
    charge(kReferenceBytes);
    return slot;
  }

  void push_shared_int(std::uint8_t integer) {
    PickleRef& slot = small_ints_[integer];
    const bool fresh = slot == nullptr;
    PickleRef value = shared(slot, PickleValue::Kind::kInt);
    if (fresh) value->integer = integer;
    stack_.push_back(std::move(value));
  }

  // Plain data has no cycles, but through the memo a pickle can append a list to itself; a
  // cycle would never be freed. One depth-first walk over every list and dict (each cycle
  // passes through one), without recursion. Found by fuzz_snapshot_pickle.
  void refuse_cycles() {
    enum class Mark : std::uint8_t { kOpen, kDone };
    std::unordered_map<const PickleValue*, Mark> marks;
    struct Frame {
      const PickleValue* value;
      std::size_t next;  // index over items, then over the keys and values of entries
    };
    const auto child = [](const PickleValue& value, std::size_t index) -> const PickleValue* {
      if (index < value.items.size()) return value.items[index].get();
      index -= value.items.size();
      const auto& entry = value.entries[index / 2];
      return index % 2 == 0 ? entry.first.get() : entry.second.get();
    };
    std::vector<Frame> path;
    for (const PickleRef& root : containers_) {
      if (marks.contains(root.get())) continue;
      marks.emplace(root.get(), Mark::kOpen);
      path.push_back({root.get(), 0});
      while (!path.empty()) {
        Frame& frame = path.back();
        const std::size_t children = frame.value->items.size() + 2 * frame.value->entries.size();
        if (frame.next == children) {
          marks[frame.value] = Mark::kDone;
          path.pop_back();
          continue;
        }
        const PickleValue* next = child(*frame.value, frame.next++);
        if (next->kind != PickleValue::Kind::kList && next->kind != PickleValue::Kind::kTuple &&
            next->kind != PickleValue::Kind::kDict) {
          continue;
        }
        const auto [it, fresh] = marks.emplace(next, Mark::kOpen);
        if (!fresh) {
          if (it->second == Mark::kOpen) fail("a list or dict contains itself");
          continue;
        }
        path.push_back({next, 0});
      }
    }
  }

  void push_int(std::int64_t integer) {
    PickleRef value = make(PickleValue::Kind::kInt);
    value->integer = integer;
    stack_.push_back(std::move(value));
  }

  void push_string(std::string_view text) {
    if (text.empty()) {
      stack_.push_back(shared(empty_string_, PickleValue::Kind::kString));
      return;
    }
    charge(text.size());
    PickleRef value = make(PickleValue::Kind::kString);
    value->text.assign(text);
    stack_.push_back(std::move(value));
  }

  // Little-endian two's complement of any width (LONG1/LONG4). Wider than 8 bytes, it fits 64
  // bits only where the bytes past the eighth repeat the eighth's sign (a longer encoding than
  // Python writes); otherwise it is a kBigInt, whose value is not kept. PyTorch writes such
  // ints where a snapshot's reader needs no number: a Python frame's line of 2^64 - 1 (found
  // in snapshots of public repositories, where it stopped the conversion); a reader that needs
  // one refuses it (snapshot_converter.cpp).
  void push_long(std::size_t width) {
    if (width > 8) {
      const std::string_view bytes = take(width);
      const unsigned char sign = (static_cast<unsigned char>(bytes[7]) & 0x80) != 0 ? 0xff : 0x00;
      const bool fits = std::all_of(bytes.begin() + 8, bytes.end(), [&](char byte) {
        return static_cast<unsigned char>(byte) == sign;
      });
      if (!fits) {
        stack_.push_back(make(PickleValue::Kind::kBigInt));
        return;
      }
      push_int(static_cast<std::int64_t>(unsigned_le(bytes)));
      return;
    }
    std::uint64_t raw = take_unsigned_le(width);
    if (width > 0 && width < 8 && (raw >> (8 * width - 1)) != 0) {
      raw |= ~std::uint64_t{0} << (8 * width);  // sign-extend
    }
    push_int(static_cast<std::int64_t>(raw));
  }

  PickleRef pop() {
    if (stack_.size() <= floor()) fail("stack underflow");
    PickleRef top = std::move(stack_.back());
    stack_.pop_back();
    return top;
  }

  std::size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }

  // Pops everything above the newest MARK, and the MARK.
  std::vector<PickleRef> pop_to_mark() {
    if (marks_.empty()) fail("no MARK on the stack");
    std::size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<PickleRef> items(
        std::make_move_iterator(stack_.begin() + static_cast<std::ptrdiff_t>(mark)),
        std::make_move_iterator(stack_.end()));
    stack_.resize(mark);
    return items;
  }

  PickleValue& top_container(PickleValue::Kind kind, const char* opname) {
    if (stack_.size() <= floor()) fail(std::string(opname) + " with nothing to add to");
    PickleValue& target = *stack_.back();
    if (target.kind != kind) {
      fail(std::string(opname) + " on a " + kind_name(target.kind) + ", expected a " +
           kind_name(kind));
    }
    return target;
  }

  void add_entries(std::vector<PickleRef> flat, const char* opname) {
    if (flat.size() % 2 != 0) fail(std::string(opname) + " with an odd number of keys and values");
    PickleValue& dict = top_container(PickleValue::Kind::kDict, opname);
    for (std::size_t i = 0; i < flat.size(); i += 2) {
      dict.entries.emplace_back(std::move(flat[i]), std::move(flat[i + 1]));
    }
  }

  void push_tuple(std::vector<PickleRef> items) {
    if (items.empty()) {
      stack_.push_back(shared(empty_tuple_, PickleValue::Kind::kTuple));
      return;
    }
    PickleRef tuple = make(PickleValue::Kind::kTuple);
    tuple->items = std::move(items);
    stack_.push_back(std::move(tuple));
  }

  void memo_put(std::uint64_t index) {
    if (stack_.size() <= floor()) fail("memoizing an empty stack");
    const auto [it, fresh] = memo_.try_emplace(index, stack_.back());
    if (fresh) {
      charge(kMemoEntryBytes);
    } else {
      it->second = stack_.back();
    }
  }

  void memo_get(std::uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) fail("memo key " + std::to_string(index) + " was never stored");
    charge(kReferenceBytes);
    stack_.push_back(it->second);
  }

  void step(unsigned char op) {
    switch (op) {
      case kProto: {
        auto version = static_cast<unsigned char>(take(1)[0]);
        if (version > kHighestProtocol) {
          fail("unsupported pickle protocol " + std::to_string(version) + " (at most 5)");
        }
        return;
      }
      case kFrame:
        // Framing only groups opcodes for buffered reading; the content is read as is.
        take_unsigned_le(8);
        return;
      case kMark:
        charge(sizeof(std::size_t));
        marks_.push_back(stack_.size());
        return;
      case kPop: pop(); return;
      case kPopMark: pop_to_mark(); return;
      case kDup: {
        if (stack_.size() <= floor()) fail("DUP of an empty stack");
        charge(kReferenceBytes);
        stack_.push_back(stack_.back());
        return;
      }
      case kNone: stack_.push_back(shared(none_, PickleValue::Kind::kNone)); return;
      case kNewTrue:
      case kNewFalse: {
        PickleRef& slot = op == kNewTrue ? true_ : false_;
        const bool fresh = slot == nullptr;
        PickleRef value = shared(slot, PickleValue::Kind::kBool);
        if (fresh) value->boolean = op == kNewTrue;
        stack_.push_back(std::move(value));
        return;
      }
      case kBinInt: push_int(static_cast<std::int32_t>(take_unsigned_le(4))); return;
      case kBinInt1: push_shared_int(static_cast<std::uint8_t>(take_unsigned_le(1))); return;
      case kBinInt2: push_int(static_cast<std::int64_t>(take_unsigned_le(2))); return;
      case kLong1: push_long(static_cast<std::size_t>(take_unsigned_le(1))); return;
      case kLong4: push_long(take_length(4)); return;
      case kBinFloat: {
        // The only big-endian field of the format.
        std::uint64_t raw = 0;
        for (char byte : take(8)) raw = (raw << 8) | static_cast<unsigned char>(byte);
        PickleRef value = make(PickleValue::Kind::kFloat);
        value->real = std::bit_cast<double>(raw);
        stack_.push_back(std::move(value));
        return;
      }
      case kShortBinUnicode:
      case kShortBinBytes: push_string(take(take_length(1))); return;
      case kBinUnicode:
      case kBinBytes: push_string(take(take_length(4))); return;
      case kBinUnicode8:
      case kBinBytes8: push_string(take(take_length(8))); return;
      case kEmptyDict: stack_.push_back(make(PickleValue::Kind::kDict)); return;
      case kEmptyList: stack_.push_back(make(PickleValue::Kind::kList)); return;
      case kEmptyTuple: push_tuple({}); return;
      case kDict: {
        auto flat = pop_to_mark();
        stack_.push_back(make(PickleValue::Kind::kDict));
        add_entries(std::move(flat), "DICT");
        return;
      }
      case kList: {
        auto items = pop_to_mark();
        PickleRef list = make(PickleValue::Kind::kList);
        list->items = std::move(items);
        stack_.push_back(std::move(list));
        return;
      }
      case kTuple: push_tuple(pop_to_mark()); return;
      case kTuple1:
      case kTuple2:
      case kTuple3: {
        std::size_t count = op - kTuple1 + 1u;
        std::vector<PickleRef> items(count);
        for (std::size_t i = count; i > 0; --i) items[i - 1] = pop();
        push_tuple(std::move(items));
        return;
      }
      case kAppend: {
        PickleRef item = pop();
        top_container(PickleValue::Kind::kList, "APPEND").items.push_back(std::move(item));
        return;
      }
      case kAppends: {
        auto items = pop_to_mark();
        PickleValue& list = top_container(PickleValue::Kind::kList, "APPENDS");
        list.items.insert(list.items.end(), std::make_move_iterator(items.begin()),
                          std::make_move_iterator(items.end()));
        return;
      }
      case kSetItem: {
        PickleRef value = pop();
        PickleRef key = pop();
        add_entries({std::move(key), std::move(value)}, "SETITEM");
        return;
      }
      case kSetItems: add_entries(pop_to_mark(), "SETITEMS"); return;
      case kMemoize: memo_put(memo_.size()); return;
      case kBinPut: memo_put(take_unsigned_le(1)); return;
      case kLongBinPut: memo_put(take_unsigned_le(4)); return;
      case kBinGet: memo_get(take_unsigned_le(1)); return;
      case kLongBinGet: memo_get(take_unsigned_le(4)); return;
      default: break;
    }
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", op);
    if (const char* name = object_opcode_name(op)) {
      fail(std::string("unexpected type: opcode ") + name + " (" + hex +
           ") would import or build a Python object; a snapshot holds only plain data "
           "(dict, list, tuple, str, int, float, bool, None)");
    }
    fail(std::string("unsupported opcode ") + hex + " (not a protocol 2..5 plain-data opcode)");
  }

  std::string_view bytes_;
  const std::string& source_;
  std::size_t pos_ = 0;
  std::size_t offset_ = 0;  // offset of the opcode being executed, for messages
  std::vector<PickleRef> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, PickleRef> memo_;
  std::vector<PickleRef> containers_;  // every list and dict made, until STOP
  // Note [Memory of a hostile pickle]: the values made once, and what has been counted.
  PickleRef none_, true_, false_, empty_tuple_, empty_string_;
  std::array<PickleRef, 256> small_ints_;
  std::size_t memory_ = 0;
  std::size_t memory_limit_;
};

}  // namespace

PickleRef parse_pickle(std::string_view bytes, const std::string& source) {
  return Reader(bytes, source).run();
}

bool looks_like_pickle(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == kProto;
}

}  // namespace cudacache::replay
