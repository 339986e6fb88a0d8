#include "pickle_writer.h"

#include <stdexcept>

namespace cudacache::replay {
namespace {

// Protocol 2 opcodes (Python's Lib/pickletools.py documents each).
constexpr char kProto = '\x80';
constexpr char kStop = '.';
constexpr char kMark = '(';
constexpr char kEmptyDict = '}';
constexpr char kSetItems = 'u';
constexpr char kEmptyList = ']';
constexpr char kAppends = 'e';
constexpr char kNone = 'N';
constexpr char kNewTrue = '\x88';
constexpr char kNewFalse = '\x89';
constexpr char kBinInt1 = 'K';   // unsigned 1 byte
constexpr char kBinInt2 = 'M';   // unsigned 2 bytes, little endian
constexpr char kBinInt = 'J';    // signed 4 bytes, little endian
constexpr char kLong1 = '\x8a';  // n bytes of two's complement, little endian
constexpr char kBinUnicode = 'X';

// Python's pickler batches APPENDS and SETITEMS by this many items too.
constexpr std::size_t kBatchItems = 1000;

void append_le(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

}  // namespace

PickleWriter::PickleWriter() {
  bytes_ += kProto;
  bytes_ += '\x02';
}

void PickleWriter::open(char empty_opcode, Container container) {
  bytes_ += empty_opcode;
  bytes_ += kMark;
  open_.push_back({container});
}

void PickleWriter::close(char batch_opcode, Container container) {
  if (open_.empty() || open_.back().container != container) {
    throw std::logic_error("PickleWriter: end of a container that is not open");
  }
  open_.pop_back();
  bytes_ += batch_opcode;
  added();
}

void PickleWriter::added() {
  if (open_.empty()) return;
  Open& top = open_.back();
  const bool dict = top.container == Container::kDict;
  if (++top.items < (dict ? 2 * kBatchItems : kBatchItems)) return;
  bytes_ += dict ? kSetItems : kAppends;
  bytes_ += kMark;
  top.items = 0;
}

void PickleWriter::begin_dict() { open(kEmptyDict, Container::kDict); }
void PickleWriter::end_dict() { close(kSetItems, Container::kDict); }
void PickleWriter::begin_list() { open(kEmptyList, Container::kList); }
void PickleWriter::end_list() { close(kAppends, Container::kList); }

void PickleWriter::value(std::string_view text) {
  if (text.size() > 0xffffffffu) throw std::length_error("PickleWriter: string over 4 GiB");
  bytes_ += kBinUnicode;
  append_le(bytes_, text.size(), 4);
  bytes_.append(text);
  added();
}

void PickleWriter::value(std::int64_t number) {
  if (number >= 0 && number <= 0xff) {
    bytes_ += kBinInt1;
    append_le(bytes_, static_cast<std::uint64_t>(number), 1);
  } else if (number >= 0 && number <= 0xffff) {
    bytes_ += kBinInt2;
    append_le(bytes_, static_cast<std::uint64_t>(number), 2);
  } else if (number >= INT32_MIN && number <= INT32_MAX) {
    bytes_ += kBinInt;
    append_le(bytes_, static_cast<std::uint64_t>(number), 4);
  } else {
    // Eight bytes of two's complement always hold an int64.
    bytes_ += kLong1;
    bytes_ += '\x08';
    append_le(bytes_, static_cast<std::uint64_t>(number), 8);
  }
  added();
}

void PickleWriter::value(std::uint64_t number) {
  if (number <= static_cast<std::uint64_t>(INT64_MAX)) {
    value(static_cast<std::int64_t>(number));
    return;
  }
  // Above 2^63 - 1: a ninth, zero byte keeps the number positive.
  bytes_ += kLong1;
  bytes_ += '\x09';
  append_le(bytes_, number, 8);
  bytes_ += '\x00';
  added();
}

void PickleWriter::value(bool flag) {
  bytes_ += flag ? kNewTrue : kNewFalse;
  added();
}

void PickleWriter::none() {
  bytes_ += kNone;
  added();
}

const std::string& PickleWriter::finish() {
  if (!open_.empty()) throw std::logic_error("PickleWriter: a container is still open");
  if (!finished_) bytes_ += kStop;
  finished_ = true;
  return bytes_;
}

}  // namespace cudacache::replay
