#include "process_allocators.h"

#include "device_api.h"
#include "error_report.h"
#include "log.h"

#include <cstdlib>
#include <string>
#include <string_view>

namespace cudacache {

ProcessAllocators& ProcessAllocators::instance() {
  static auto* allocators = new ProcessAllocators;  // never destroyed, see process_allocators.h
  return *allocators;
}

ProcessAllocators::ProcessAllocators() : hooks_(std::make_shared<RetryHooks>()) {}

void ProcessAllocators::configure(std::string_view config) {
  MutexLock lock(mutex_);
  if (started_) {
    report::config_after_first_use(options_.to_config_string());
  }
  Options check;
  check.apply(config);  // throws with the offending key or value
  // An empty (or blank) configuration changes nothing; appended, it would be an empty entry
  // that fails every later first use.
  if (config.find_first_not_of(" \t\n\r\f\v") == std::string_view::npos) return;
  std::string joined = configured_;
  if (!joined.empty()) joined.push_back(',');
  joined.append(config.data(), config.size());
  // Checked as first use will apply it, after CUDACACHE_CONF and the earlier strings: alone,
  // "policy:cudacache" then "expandable_segments:True" each passed, and every allocation then
  // failed on the pair.
  try {
    (void)options_from(joined);
  } catch (const Error& error) {
    std::string cause = error.what();
    const std::string_view prefix = "cudacache config: ";
    if (cause.starts_with(prefix)) cause.erase(0, prefix.size());
    const char* environment = std::getenv("CUDACACHE_CONF");
    report::config_conflict(
        "cudacache_configure(\"" + std::string(config) +
        "\") conflicts with what is configured before it (CUDACACHE_CONF " +
        (environment != nullptr ? "\"" + std::string(environment) + "\"" : std::string("unset")) +
        ", earlier cudacache_configure strings \"" + configured_ + "\"): " + cause);
  }
  configured_ = std::move(joined);
}

Options ProcessAllocators::options_from(const std::string& configured) {
  Options options;
  if (const char* environment = std::getenv("CUDACACHE_CONF")) options.apply(environment);
  // The cudacache_configure() strings, each checked alone in configure(), joined in order: a
  // later one overrides an earlier one's keys.
  if (!configured.empty()) options.apply(configured, Options::RepeatedKeys::kLastWins);
  return options;
}

Options ProcessAllocators::pending_options() const { return options_from(configured_); }

void ProcessAllocators::start() {
  if (started_) return;
  // A runtime that fails otherwise than "no GPU" is reported, and nothing is fixed yet: the
  // next call asks again (found in review: any failure was taken for 0 devices for good, every
  // later call then said "invalid device ordinal 0 (0 devices)").
  int count = 0;
  if (const cudaError_t error = device_api::device_count(&count); error != cudaSuccess) {
    report::cuda_error("cudaGetDeviceCount", -1, error);
  }
  options_ = pending_options();
  device_count_ = count;
  allocators_ =
      std::make_unique<std::atomic<DeviceAllocator*>[]>(static_cast<std::size_t>(device_count_));
  for (int i = 0; i < device_count_; ++i) allocators_[static_cast<std::size_t>(i)] = nullptr;
  started_ = true;
  ready_.store(true, std::memory_order_release);
  logger().info("cudacache started: {} devices, options {}", device_count_,
                options_.to_config_string());
}

DeviceAllocator& ProcessAllocators::device(int device) {
  if (!ready_.load(std::memory_order_acquire)) {
    MutexLock lock(mutex_);
    start();
  }
  if (device == -1) {
    const cudaError_t error = device_api::current_device(&device);
    if (error != cudaSuccess) {
      report::cuda_error("cudaGetDevice", -1, error);
    }
  }
  if (device < 0 || device >= device_count_) {
    report::invalid_device(device, device_count_);
  }
  std::atomic<DeviceAllocator*>& slot = allocators_[static_cast<std::size_t>(device)];
  if (DeviceAllocator* existing = slot.load(std::memory_order_acquire)) return *existing;
  MutexLock lock(mutex_);
  if (DeviceAllocator* existing = slot.load(std::memory_order_acquire)) return *existing;
  auto* created = new DeviceAllocator(device, options_, hooks_);
  slot.store(created, std::memory_order_release);
  return *created;
}

std::vector<DeviceAllocator*> ProcessAllocators::created() const {
  std::vector<DeviceAllocator*> result;
  if (!ready_.load(std::memory_order_acquire)) return result;
  for (int i = 0; i < device_count_; ++i) {
    if (DeviceAllocator* allocator = allocators_[static_cast<std::size_t>(i)].load()) {
      result.push_back(allocator);
    }
  }
  return result;
}

int ProcessAllocators::mark_step() {
  int found = 0;
  for (DeviceAllocator* allocator : created()) found += allocator->mark_step() ? 1 : 0;
  return found;
}

StackKind to_stack_kind(int stacks) {
  switch (stacks) {
    case CUDACACHE_STACKS_NONE: return StackKind::kNone;
    case CUDACACHE_STACKS_CPP: return StackKind::kCpp;
    case CUDACACHE_STACKS_PYTHON: return StackKind::kPython;
    case CUDACACHE_STACKS_ALL: return StackKind::kAll;
    default: break;
  }
  report::invalid_argument(
      "cudacache: stacks must be CUDACACHE_STACKS_NONE, _CPP, _PYTHON or "
      "_ALL (0 to 3), not " +
      std::to_string(stacks));
}

unsigned checked_rising_steps(unsigned rising_steps) {
  if (rising_steps == 1 || rising_steps > GrowthSteps::kMax) {
    report::invalid_argument("cudacache: watch_growth's rising_steps must be 0 (stop) or 2 to " +
                             std::to_string(GrowthSteps::kMax) + ", not " +
                             std::to_string(rising_steps));
  }
  return rising_steps;
}

void ProcessAllocators::reset_for_testing() {
  MutexLock lock(mutex_);
  ready_.store(false, std::memory_order_release);
  for (int i = 0; i < device_count_; ++i) {
    delete allocators_[static_cast<std::size_t>(i)].exchange(nullptr);
  }
  allocators_.reset();
  device_count_ = 0;
  started_ = false;
  configured_.clear();
  options_ = Options();
  hooks_ = std::make_shared<RetryHooks>();
}

std::string ProcessAllocators::config_help() {
  MutexLock lock(mutex_);
  if (started_) return options_.describe();
  return pending_options().describe();
}

}  // namespace cudacache
