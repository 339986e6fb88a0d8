// The plain Python data a PyTorch memory snapshot is made of: dict, list, tuple, str, int,
// float, bool and None. Nothing else can be represented, by design.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cudacache::replay {

struct PickleValue;
// Shared because the pickle memo lets one object appear in many places.
using PickleRef = std::shared_ptr<PickleValue>;

struct PickleValue {
  // kBigInt: an int that does not fit 64 signed bits; its value is not kept (parse_pickle).
  enum class Kind : std::uint8_t {
    kNone,
    kBool,
    kInt,
    kBigInt,
    kFloat,
    kString,
    kList,
    kTuple,
    kDict
  };

  PickleValue() = default;
  // Releases nested containers iteratively: a hostile pickle nested a million levels deep
  // must not overflow the stack when it is freed.
  ~PickleValue();
  PickleValue(const PickleValue&) = delete;
  PickleValue& operator=(const PickleValue&) = delete;

  Kind kind = Kind::kNone;
  bool boolean = false;
  std::int64_t integer = 0;
  double real = 0.0;
  std::string text;                                      // kString (str and bytes)
  std::vector<PickleRef> items;                          // kList, kTuple
  std::vector<std::pair<PickleRef, PickleRef>> entries;  // kDict, in insertion order

  bool is_dict() const { return kind == Kind::kDict; }
  bool is_list() const { return kind == Kind::kList || kind == Kind::kTuple; }

  // Dict lookup by string key; nullptr when absent or when this is not a dict.
  const PickleValue* find(std::string_view key) const;

 private:
  void move_children_to(std::vector<PickleRef>& out);
};

// "dict", "list", ... for error messages.
const char* kind_name(PickleValue::Kind kind);

}  // namespace cudacache::replay
