#include "retry_hooks.h"

#include "log.h"

#include <algorithm>
#include <exception>

namespace cudacache {

int RetryHooks::add(RetryHook hook) {
  MutexLock lock(mutex_);
  const int handle = next_handle_++;
  hooks_.emplace_back(handle, std::move(hook));
  return handle;
}

bool RetryHooks::remove(int handle) {
  MutexLock lock(mutex_);
  const auto it = std::find_if(hooks_.begin(), hooks_.end(),
                               [&](const auto& entry) { return entry.first == handle; });
  if (it == hooks_.end()) return false;
  hooks_.erase(it);
  return true;
}

bool RetryHooks::empty() const {
  MutexLock lock(mutex_);
  return hooks_.empty();
}

bool RetryHooks::run(const OomContext& context) const {
  std::vector<std::pair<int, RetryHook>> hooks;
  {
    MutexLock lock(mutex_);
    hooks = hooks_;  // a hook may register or remove hooks
  }
  bool retry = false;
  for (const auto& [handle, hook] : hooks) {
    try {
      if (hook(context)) retry = true;
    } catch (const std::exception& error) {
      logger().error("retry hook {} threw: {}", handle, error.what());
    } catch (...) {
      logger().error("retry hook {} threw a non-standard exception", handle);
    }
  }
  return retry;
}

}  // namespace cudacache
