// Mutex and MutexLock: std::mutex and a scoped lock that carry clang's capability annotations,
// so that -Wthread-safety checks every CUDACACHE_GUARDED_BY and CUDACACHE_REQUIRES against the
// locks actually taken (libstdc++'s std::mutex carries none). scudo's mutex.h is the model.
#pragma once

#include "thread_annotations.h"

#include <mutex>

namespace cudacache {

class CUDACACHE_CAPABILITY("mutex") Mutex {
 public:
  void lock() CUDACACHE_ACQUIRE() { mutex_.lock(); }
  void unlock() CUDACACHE_RELEASE() { mutex_.unlock(); }
  bool try_lock() CUDACACHE_TRY_ACQUIRE(true) { return mutex_.try_lock(); }

 private:
  std::mutex mutex_;
};

// Holds `mutex` for its scope. unlock()/lock() let a caller drop it around code that must run
// unlocked (the retry hooks) and take it back; the destructor releases it only if held.
class CUDACACHE_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mutex) CUDACACHE_ACQUIRE(mutex) : mutex_(mutex) { mutex_.lock(); }
  ~MutexLock() CUDACACHE_RELEASE() {
    if (held_) mutex_.unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void unlock() CUDACACHE_RELEASE() {
    mutex_.unlock();
    held_ = false;
  }
  void lock() CUDACACHE_ACQUIRE() {
    mutex_.lock();
    held_ = true;
  }

 private:
  Mutex& mutex_;
  bool held_ = true;
};

}  // namespace cudacache
