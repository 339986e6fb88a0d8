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
  int add(RetryHook hook);  // returns a handle > 0
  bool remove(int handle);
  bool empty() const;

  // Calls every hook in registration order, outside any allocator lock, and returns whether
  // one of them asked for another attempt. A hook that throws counts as "no".
  bool run(const OomContext& context) const;

 private:
  mutable Mutex mutex_;  // never held while hooks run
  std::vector<std::pair<int, RetryHook>> hooks_ CUDACACHE_GUARDED_BY(mutex_);
  int next_handle_ CUDACACHE_GUARDED_BY(mutex_) = 1;
};

}  // namespace cudacache
