// CUDACACHE_SNAPSHOT_AT_EXIT=1 writes the process's memory snapshot (torch.cuda.memory.
// _snapshot()'s schema, as JSON) to stderr at exit; any other value except 0 is a file path.
// With CUDACACHE_CONF="record_history:N,record_stacks:cpp" its device_traces and allocated
// blocks carry the frames of each allocation: where an unmodified program allocated.
// Written only when some device has an allocator.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "device_caches.h"
#include "snapshot.h"

namespace cudacache::preload {
namespace {

// One snapshot per device up to the last one with an allocator (PyTorch gives every device a
// device_traces list); empty when no device has one.
std::vector<MemorySnapshot> device_snapshots() {
  std::vector<MemorySnapshot> snapshots;
  for (int device = 0; device < kMaxDevices; ++device) {
    if (DeviceAllocator* allocator = existing_allocator(device)) {
      snapshots.resize(static_cast<std::size_t>(device) + 1);
      snapshots.back() = allocator->snapshot();
    }
  }
  return snapshots;
}

// A destructor, like the exit summary: it runs after main and the program's atexit handlers.
__attribute__((destructor)) void snapshot_at_exit() {
  if (caches_are_inherited()) return;  // a forked child: its parent reports
  const char* target = std::getenv("CUDACACHE_SNAPSHOT_AT_EXIT");
  if (target == nullptr || target[0] == '\0' || std::strcmp(target, "0") == 0) return;
  const std::vector<MemorySnapshot> snapshots = device_snapshots();
  if (snapshots.empty()) return;
  const std::string json = snapshots_to_json(snapshots);
  if (std::strcmp(target, "1") == 0) {
    std::fprintf(stderr, "%s\n", json.c_str());
    return;
  }
  std::FILE* out = std::fopen(target, "w");
  if (out == nullptr || std::fputs(json.c_str(), out) < 0) {
    std::fprintf(stderr, "cudacache: cannot write the snapshot to %s\n", target);
  }
  if (out != nullptr) std::fclose(out);
}

}  // namespace
}  // namespace cudacache::preload
