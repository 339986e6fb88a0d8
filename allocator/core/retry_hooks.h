// User hooks called when an allocation fails after the allocator released its own cache.
// Shared by all DeviceAllocators of the C/C++ API; each standalone DeviceAllocator has its own.
#pragma once

#include "mutex.h"

#include <cudacache/cudacache.hpp>

#include <utility>
#include <vector>

namespace cudacache {

class RetryHooks {
 public:
  // Returns a handle > 0. Throws Error (INVALID_ARGUMENT) for an empty hook, or when every
  // handle an int can hold was given out.
  int add(RetryHook hook);
  bool remove(int handle);
  bool empty() const;

  // Calls every hook in registration order, outside any allocator lock, and returns whether
  // one of them asked for another attempt. A hook that throws counts as "no".
  // While they run, running_on_this_thread() is true on the calling thread: an allocation a
  // hook makes (through any allocator) fails without running the hooks again (each nested
  // allocation that failed ran them anew, without end, until the stack overflowed).
  bool run(const OomContext& context) const;
  static bool running_on_this_thread();

 private:
  mutable Mutex mutex_;  // never held while hooks run
  std::vector<std::pair<int, RetryHook>> hooks_ CUDACACHE_GUARDED_BY(mutex_);
  int next_handle_ CUDACACHE_GUARDED_BY(mutex_) = 1;
};

}  // namespace cudacache
