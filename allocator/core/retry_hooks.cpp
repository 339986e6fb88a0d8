#include "retry_hooks.h"

#include "error_report.h"
#include "log.h"
#include "scoped_flag.h"

#include <algorithm>
#include <exception>
#include <limits>

namespace cudacache {
namespace {

thread_local bool hooks_running = false;

}  // namespace

int RetryHooks::add(RetryHook hook) {
  if (!hook) report::invalid_argument("cudacache: add_retry_hook: the hook is empty");
  MutexLock lock(mutex_);
  if (next_handle_ == std::numeric_limits<int>::max()) {
    report::invalid_argument("cudacache: add_retry_hook: every retry hook handle was given out");
  }
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
  // Not nested (a nested allocation skips the hooks), so a flag is enough; restored on exit.
  const ScopedFlag running(hooks_running, true);
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

bool RetryHooks::running_on_this_thread() { return hooks_running; }

}  // namespace cudacache
