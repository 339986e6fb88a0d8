// ScopedFlag: a bool that is `value` for one scope and false again when it ends, also when it
// ends by an exception. For flags that tell code deeper in the call what kind of call it is in
// (a growth for new pages only, a growth under a granule, retry hooks running).
#pragma once

namespace cudacache {

class ScopedFlag {
 public:
  ScopedFlag(bool& flag, bool value) : flag_(flag) { flag_ = value; }
  ~ScopedFlag() { flag_ = false; }
  ScopedFlag(const ScopedFlag&) = delete;
  ScopedFlag& operator=(const ScopedFlag&) = delete;

 private:
  bool& flag_;
};

}  // namespace cudacache
