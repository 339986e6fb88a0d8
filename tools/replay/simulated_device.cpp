#include "simulated_device.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "cudasim.h"

namespace cudacache::replay {
namespace {

constexpr int kDevice = 0;
constexpr const char* kReexecMarker = "CUDACACHE_REPLAY_REEXECUTED";

}  // namespace

bool running_on_simulator() { return cudasim_available() != 0; }

void set_simulated_capacity(std::uint64_t bytes) {
  if (!running_on_simulator()) {
    throw std::runtime_error("setting the device capacity needs the simulated runtime (cudasim)");
  }
  if (cudasim_set_capacity(kDevice, static_cast<size_t>(bytes)) != 0) {
    throw std::runtime_error("cudasim_set_capacity failed");
  }
}

std::optional<std::uint64_t> simulated_capacity() {
  if (!running_on_simulator()) return std::nullopt;
  return cudasim_get_capacity(kDevice);
}

std::optional<DeviceCounters> device_counters() {
  if (!running_on_simulator()) return std::nullopt;
  cudasim_counters raw{};
  if (cudasim_get_counters(kDevice, &raw) != 0) return std::nullopt;
  return DeviceCounters{raw.mallocs, raw.frees, raw.in_use_bytes, raw.peak_bytes};
}

std::optional<DeviceCalls> device_call_counts() {
  if (!running_on_simulator() || cudasim_get_call_counts == nullptr) return std::nullopt;
  cudasim_call_counts raw{};
  if (cudasim_get_call_counts(kDevice, &raw) != 0) return std::nullopt;
  DeviceCalls calls;
  calls[DeviceCallKind::kMalloc] = raw.malloc;
  calls[DeviceCallKind::kFree] = raw.free;
  calls[DeviceCallKind::kCreate] = raw.create;
  calls[DeviceCallKind::kRelease] = raw.release;
  calls[DeviceCallKind::kMap] = raw.map;
  calls[DeviceCallKind::kUnmap] = raw.unmap;
  calls[DeviceCallKind::kSetAccess] = raw.set_access;
  calls[DeviceCallKind::kSynchronize] = raw.synchronize;
  calls[DeviceCallKind::kReserve] = raw.reserve;
  calls[DeviceCallKind::kAddressFree] = raw.address_free;
  calls[DeviceCallKind::kMemGetInfo] = raw.mem_get_info;
  return calls;
}

std::optional<std::uint64_t> thread_device_call_ns() {
  if (!running_on_simulator() || cudasim_thread_call_ns == nullptr) return std::nullopt;
  return cudasim_thread_call_ns();
}

void reset_device_counters() {
  if (running_on_simulator()) cudasim_reset_counters(kDevice);
}

std::string cudasim_dir(const std::string& build_dir) {
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return build_dir;
  const std::filesystem::path prefix = exe.parent_path().parent_path();
  for (const char* lib : {"lib", "lib64"}) {
    const std::filesystem::path dir = prefix / lib / "cudacache" / "cudasim";
    if (std::filesystem::exists(dir / "libcudart.so.13", error)) return dir.string();
  }
  return build_dir;
}

void reexec_on_simulator(const char* sim_dir, char** argv) {
  if (running_on_simulator() || std::getenv(kReexecMarker) != nullptr) return;
  std::error_code error;
  if (sim_dir == nullptr || !std::filesystem::is_directory(sim_dir, error)) return;
  std::string path = sim_dir;
  if (const char* old = std::getenv("LD_LIBRARY_PATH"); old != nullptr && *old != '\0') {
    path += ":";
    path += old;
  }
  setenv("LD_LIBRARY_PATH", path.c_str(), 1);
  setenv(kReexecMarker, "1", 1);
  execv("/proc/self/exe", argv);
  // execv only returns on failure: carry on without the simulator.
}

}  // namespace cudacache::replay
