// Test helper: writes small pickles opcode by opcode, so tests can build snapshots and
// malformed inputs without Python.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cudacache::replay::testing {

class PickleBuilder {
 public:
  PickleBuilder() { bytes_ += "\x80\x04"; }  // PROTO 4

  PickleBuilder& raw(const std::string& bytes) {
    bytes_ += bytes;
    return *this;
  }
  PickleBuilder& op(char opcode) {
    bytes_ += opcode;
    return *this;
  }
  PickleBuilder& mark() { return op('('); }
  PickleBuilder& empty_dict() { return op('}'); }
  PickleBuilder& empty_list() { return op(']'); }
  PickleBuilder& set_items() { return op('u'); }
  PickleBuilder& appends() { return op('e'); }
  PickleBuilder& memoize() { return op('\x94'); }
  PickleBuilder& none() { return op('N'); }
  PickleBuilder& boolean(bool value) { return op(value ? '\x88' : '\x89'); }
  PickleBuilder& stop() { return op('.'); }

  PickleBuilder& str(const std::string& text) {
    op('\x8c');  // SHORT_BINUNICODE
    bytes_ += static_cast<char>(text.size());
    bytes_ += text;
    return *this;
  }

  // LONG1 with 8 bytes covers every int64, addresses included.
  PickleBuilder& integer(std::int64_t value) {
    op('\x8a');
    bytes_ += '\x08';
    auto raw_value = static_cast<std::uint64_t>(value);
    for (int i = 0; i < 8; ++i) bytes_ += static_cast<char>((raw_value >> (8 * i)) & 0xff);
    return *this;
  }

  // A dict entry "key": int.
  PickleBuilder& key_int(const std::string& key, std::int64_t value) {
    return str(key).integer(value);
  }
  PickleBuilder& key_str(const std::string& key, const std::string& value) {
    return str(key).str(value);
  }

  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

// {"segments": [...], "device_traces": [[...]]} for device 0, built from trace events and
// segment blocks.
struct SnapshotEvent {
  std::string action;
  std::int64_t addr;
  std::int64_t size;
  std::int64_t stream = 0;
};

struct SnapshotBlock {
  std::int64_t address;
  std::int64_t requested_size;
  std::string state = "active_allocated";
};

struct SnapshotSegment {
  std::int64_t address;
  std::int64_t stream = 0;
  std::vector<SnapshotBlock> blocks;
};

inline std::string make_snapshot_pickle(const std::vector<SnapshotEvent>& events,
                                        const std::vector<SnapshotSegment>& segments) {
  PickleBuilder b;
  b.empty_dict().memoize().mark();
  b.str("segments").empty_list().mark();
  for (const SnapshotSegment& segment : segments) {
    b.empty_dict()
        .mark()
        .key_int("device", 0)
        .key_int("address", segment.address)
        .key_int("stream", segment.stream);
    b.str("blocks").empty_list().mark();
    for (const SnapshotBlock& block : segment.blocks) {
      b.empty_dict()
          .mark()
          .key_int("address", block.address)
          .key_int("size", block.requested_size + 512)
          .key_int("requested_size", block.requested_size)
          .key_str("state", block.state)
          .set_items();
    }
    b.appends().set_items();
  }
  b.appends();
  b.str("device_traces").empty_list().mark().empty_list().mark();
  for (const SnapshotEvent& event : events) {
    b.empty_dict()
        .mark()
        .key_str("action", event.action)
        .key_int("addr", event.addr)
        .key_int("size", event.size)
        .key_int("stream", event.stream)
        .set_items();
  }
  b.appends().appends();
  b.set_items().stop();
  return b.bytes();
}

}  // namespace cudacache::replay::testing
