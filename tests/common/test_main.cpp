// The main() of every gtest binary (cudacache_add_gtest). With CUDACACHE_FAULT_SWEEP=1, which
// tests/fault_sweep/run_suite_sweep.py sets while it reruns each test case with one device call
// failing (CUDASIM_FAIL_NTH), it also reports on stderr what the sweep judges. A test's own
// expectations may fail then (it did not ask for the fault); what counts is what the allocator
// did:
// - an exception that escapes a test body (the sweep runs with --gtest_catch_exceptions=0):
//   a typed cudacache error exits 3, anything else exits 4 and names its type (at once: no
//   exit-time work, such as cudasim's call report, follows);
// - std::terminate (an exception escaping a thread, a destructor or a noexcept function):
//   named, then abort(), a crash;
// - after each test, bytes a device holds beyond what it held before the test (everything a
//   test made must be gone once its allocators are destroyed).
#include <cudasim.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <cudacache/cudacache.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <typeinfo>
#include <vector>

namespace {

constexpr int kTypedErrorEscaped = 3;
constexpr int kUntypedExceptionEscaped = 4;

// Names what escaped; returns whether it was one of cudacache's typed errors.
bool describe(const std::exception_ptr& escaped, const char* where) {
  try {
    std::rethrow_exception(escaped);
  } catch (const cudacache::OutOfMemoryError& error) {
    std::fprintf(stderr, "fault-sweep: a typed cudacache::OutOfMemoryError escaped %s: %s\n", where,
                 error.what());
    return true;
  } catch (const cudacache::Error& error) {
    std::fprintf(stderr, "fault-sweep: a typed cudacache::Error escaped %s: %s\n", where,
                 error.what());
    return true;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "fault-sweep: an UNTYPED exception escaped %s (%s): %s\n", where,
                 typeid(error).name(), error.what());
  } catch (...) {
    std::fprintf(stderr, "fault-sweep: an UNTYPED exception escaped %s (not a std::exception)\n",
                 where);
  }
  return false;
}

[[noreturn]] void on_terminate() {
  if (const std::exception_ptr escaped = std::current_exception()) {
    describe(escaped, "into std::terminate");
  } else {
    std::fprintf(stderr, "fault-sweep: std::terminate without an exception\n");
  }
  std::abort();
}

std::vector<std::uint64_t> bytes_in_use() {
  std::vector<std::uint64_t> in_use;
  if (cudasim_get_counters == nullptr) return in_use;  // not on cudasim
  cudasim_counters counters{};
  for (int device = 0; cudasim_get_counters(device, &counters) == 0; ++device) {
    in_use.push_back(counters.in_use_bytes);
  }
  return in_use;
}

class LeakListener : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo& /*info*/) override { before_ = bytes_in_use(); }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    const std::vector<std::uint64_t> after = bytes_in_use();
    for (std::size_t device = 0; device < after.size() && device < before_.size(); ++device) {
      if (after[device] > before_[device]) {
        std::fprintf(stderr, "fault-sweep: %s.%s left %llu bytes on device %zu\n",
                     info.test_suite_name(), info.name(),
                     static_cast<unsigned long long>(after[device] - before_[device]), device);
      }
    }
  }
  std::vector<std::uint64_t> before_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const char* sweep = std::getenv("CUDACACHE_FAULT_SWEEP");
  if (sweep == nullptr || std::strcmp(sweep, "1") != 0) return RUN_ALL_TESTS();
  std::set_terminate(on_terminate);
  ::testing::UnitTest::GetInstance()->listeners().Append(new LeakListener);
  try {
    return RUN_ALL_TESTS();
  } catch (...) {
    const bool typed = describe(std::current_exception(), "a test");
    // _exit: gtest's objects of the interrupted test are never freed, which LeakSanitizer would
    // report at exit as the program's leak.
    std::fflush(nullptr);
    _exit(typed ? kTypedErrorEscaped : kUntypedExceptionEscaped);
  }
}
