#include "error_report.h"

#include "device_api.h"
#include "log.h"
#include "options.h"

#include <cudacache/cudacache.hpp>

#include <cstdio>

namespace cudacache::report {
namespace {

[[noreturn]] void log_and_throw(cudacache_status status, const std::string& message) {
  logger().error("{}", message);
  throw Error(status, message);
}

}  // namespace

void invalid_argument(const std::string& message) {
  log_and_throw(CUDACACHE_INVALID_ARGUMENT, message);
}

void invalid_device(int device, int device_count) {
  log_and_throw(CUDACACHE_INVALID_DEVICE, "cudacache: invalid device ordinal " +
                                              std::to_string(device) + " (" +
                                              std::to_string(device_count) + " devices)");
}

void wrong_device(const std::string& message) { log_and_throw(CUDACACHE_INVALID_DEVICE, message); }

void unknown_pointer(const std::string& message) {
  log_and_throw(CUDACACHE_UNKNOWN_POINTER, message);
}

void config(const std::string& message) {
  log_and_throw(CUDACACHE_CONFIG,
                "cudacache config: " + message + ". Valid keys: " + Options::valid_keys() + ".");
}

void config_conflict(const std::string& message) {
  log_and_throw(CUDACACHE_CONFIG, "cudacache config: " + message);
}

void config_after_first_use(const std::string& options) {
  log_and_throw(CUDACACHE_CONFIG,
                "cudacache_configure must be called before cudacache is first used (the first "
                "call that names a device: an allocation, a free, a statistics query); the "
                "options are fixed then (" +
                    options + ")");
}

void cuda_error(const std::string& call, int device, cudaError_t error) {
  const std::string where = device >= 0 ? " on device " + std::to_string(device) : "";
  log_and_throw(CUDACACHE_CUDA_ERROR,
                "cudacache: " + call + where + " failed: " + device_api::error_string(error));
}

std::string pointer_text(const void* ptr) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", ptr);
  return text;
}

}  // namespace cudacache::report
