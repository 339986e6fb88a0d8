#include "pickle_value.h"

namespace cudacache::replay {

PickleValue::~PickleValue() {
  std::vector<PickleRef> pending;
  move_children_to(pending);
  while (!pending.empty()) {
    PickleRef child = std::move(pending.back());
    pending.pop_back();
    // The last owner empties the child first, so its own destructor has nothing to recurse into.
    if (child.use_count() == 1) child->move_children_to(pending);
  }
}

void PickleValue::move_children_to(std::vector<PickleRef>& out) {
  for (PickleRef& item : items) out.push_back(std::move(item));
  for (auto& [key, value] : entries) {
    out.push_back(std::move(key));
    out.push_back(std::move(value));
  }
  items.clear();
  entries.clear();
}

const PickleValue* PickleValue::find(std::string_view key) const {
  if (kind != Kind::kDict) return nullptr;
  // Later entries win, as in Python when a key is set twice.
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    const PickleValue& k = *it->first;
    if (k.kind == Kind::kString && k.text == key) return it->second.get();
  }
  return nullptr;
}

const char* kind_name(PickleValue::Kind kind) {
  switch (kind) {
    case PickleValue::Kind::kNone: return "None";
    case PickleValue::Kind::kBool: return "bool";
    case PickleValue::Kind::kInt: return "int";
    case PickleValue::Kind::kBigInt: return "int of more than 64 bits";
    case PickleValue::Kind::kFloat: return "float";
    case PickleValue::Kind::kString: return "str";
    case PickleValue::Kind::kList: return "list";
    case PickleValue::Kind::kTuple: return "tuple";
    case PickleValue::Kind::kDict: return "dict";
  }
  return "?";
}

}  // namespace cudacache::replay
