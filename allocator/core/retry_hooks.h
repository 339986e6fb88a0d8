// User hooks called when an allocation fails after the allocator released its own cache.
// Shared by all DeviceAllocators of the C/C++ API; each standalone DeviceAllocator has its own.
#pragma once

#include "mutex.h"

#include <cudacache/cudacache.hpp>

#include <condition_variable>
#include <memory>
#include <vector>

namespace cudacache {

class RetryHooks {
 public:
  // Returns a handle > 0. Throws Error (INVALID_ARGUMENT) for an empty hook, or when every
  // handle an int can hold was given out.
  int add(RetryHook hook);
  // Removes the hook; false when no hook has that handle. Once it returns, the hook is never
  // called again and no call of it is running (another thread's call that had begun is waited
  // for), so what the hook uses may be freed: except when called from inside a hook (one that
  // removes itself or another), which waits for nothing, as waiting there could never end.
  bool remove(int handle);
  bool empty() const;

  // Calls every hook in registration order, outside any allocator lock, and returns whether
  // one of them asked for another attempt. A hook that throws counts as "no". Each hook is
  // the one object registered (a callable that keeps state keeps it from call to call), and
  // threads that run out of memory at once may call it at once.
  // While they run, running_on_this_thread() is true on the calling thread: an allocation a
  // hook makes (through any allocator) fails without running the hooks again (each nested
  // allocation that failed ran them anew, without end, until the stack overflowed).
  bool run(const OomContext& context) const;
  static bool running_on_this_thread();

 private:
  // A registered hook, shared by run()'s copies of the list: removing it from the list does not
  // end the calls already under way. `calls` and `removed` are guarded by mutex_.
  struct Entry {
    int handle = 0;
    RetryHook hook;
    int calls = 0;         // calls of it running now
    bool removed = false;  // no call starts once set
  };

  // Calls the hook; false when it throws (logged). Never throws.
  static bool call(Entry& entry, const OomContext& context) noexcept;

  mutable Mutex mutex_;                              // never held while hooks run
  mutable std::condition_variable_any calls_ended_;  // with mutex_: an Entry's calls fell to 0
  std::vector<std::shared_ptr<Entry>> hooks_ CUDACACHE_GUARDED_BY(mutex_);
  int next_handle_ CUDACACHE_GUARDED_BY(mutex_) = 1;
};

}  // namespace cudacache
