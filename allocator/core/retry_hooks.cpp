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
  auto entry = std::make_shared<Entry>();
  entry->handle = next_handle_;
  entry->hook = std::move(hook);
  hooks_.push_back(std::move(entry));  // may throw: the handle is taken only after it
  return next_handle_++;
}

bool RetryHooks::remove(int handle) {
  MutexLock lock(mutex_);
  const auto it = std::find_if(hooks_.begin(), hooks_.end(),
                               [&](const auto& entry) { return entry->handle == handle; });
  if (it == hooks_.end()) return false;
  const std::shared_ptr<Entry> entry = *it;
  hooks_.erase(it);
  entry->removed = true;
  // A caller outside the hooks may free what the hook uses as soon as this returns: the calls
  // another thread began are waited for. Inside a hook, they may include this thread's own.
  if (!hooks_running) {
    while (entry->calls > 0) calls_ended_.wait(mutex_);
  }
  return true;
}

bool RetryHooks::empty() const {
  MutexLock lock(mutex_);
  return hooks_.empty();
}

bool RetryHooks::run(const OomContext& context) const {
  std::vector<std::shared_ptr<Entry>> hooks;
  {
    MutexLock lock(mutex_);
    hooks = hooks_;  // a hook may register or remove hooks
  }
  // Not nested (a nested allocation skips the hooks), so a flag is enough; restored on exit.
  const ScopedFlag running(hooks_running, true);
  bool retry = false;
  for (const std::shared_ptr<Entry>& entry : hooks) {
    {
      MutexLock lock(mutex_);
      if (entry->removed) continue;  // removed since the copy: never called again
      ++entry->calls;
    }
    if (call(*entry, context)) retry = true;
    MutexLock lock(mutex_);
    if (--entry->calls == 0 && entry->removed) calls_ended_.notify_all();
  }
  return retry;
}

bool RetryHooks::call(Entry& entry, const OomContext& context) noexcept {
  try {
    return entry.hook(context);
  } catch (const std::exception& error) {
    logger().error("retry hook {} threw: {}", entry.handle, error.what());
  } catch (...) {
    logger().error("retry hook {} threw a non-standard exception", entry.handle);
  }
  return false;
}

bool RetryHooks::running_on_this_thread() { return hooks_running; }

}  // namespace cudacache
