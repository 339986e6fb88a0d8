// Must NOT compile under clang's -Wthread-safety (tests/thread_safety/CMakeLists.txt builds it
// as a test that passes when the build fails for this reason): it proves that the annotations
// on cudacache::Mutex are checked, so that a guarded member touched without its lock, as in
// DeviceAllocator, fails the `clang` build.
#include "mutex.h"

namespace {

class Counter {
 public:
  void add_locked() {
    cudacache::MutexLock lock(mutex_);
    ++value_;
  }
  void add_unlocked() { ++value_; }  // the violation

 private:
  cudacache::Mutex mutex_;
  int value_ CUDACACHE_GUARDED_BY(mutex_) = 0;
};

}  // namespace

int main() {
  Counter counter;
  counter.add_locked();
  counter.add_unlocked();
  return 0;
}
