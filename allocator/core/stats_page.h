// The stats page: the small shared-memory file in which a process publishes the counters of
// its allocators for cudacache-top (tools/top). One file per process (per copy of the
// allocator in it), named cudacache-<pid>-<n> in stats_directory(), mode 0600.
//
// Layout (version 2): a Header, then one slot of kSlotWords 64-bit words per device:
//   word 0        claimed: 1 while an allocator of that device publishes here
//   word 1        sequence: a seqlock, odd while a write is in progress
//   word 2        check: slot_check(sequence, values), never 0
//   words 3...    the Field values
// Each device's slot has a single writer (its allocator, under its own mutex): a write is two
// stores of the sequence around stores of the values and the check, with no lock and no system
// call.
// Readers check the header with pread, map the file read-only and keep a slot only when its
// sequence was even and unchanged around the values and the check matches them (a file truncated
// meanwhile is reported, not a crash: SIGBUS is caught during the read; one truncated and grown
// back between two reads has zeros in place of part of a slot, which the check refuses).
//
// Liveness: the publishing process holds a shared flock on its file for as long as it runs
// (close-on-exec, so an exec also lets go). A file nobody holds is abandoned, whatever its pid
// says (pids are reused), and may be removed by anyone who owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cudacache::stats_page {

inline constexpr std::uint64_t kMagic = 0x3165676170636375ULL;  // "uccpage1", little-endian
inline constexpr std::uint32_t kVersion = 2;
inline constexpr std::size_t kCommandBytes = 256;
inline constexpr std::uint32_t kMaxDevices = 4096;

enum Field : std::size_t {
  kAllocatedBytes,
  kReservedBytes,
  kRequestedBytes,
  kPeakAllocatedBytes,
  kPeakReservedBytes,
  kLargestFreeBlockBytes,  // the largest free cached block, any stream and pool
  kAllocations,            // live allocations
  kSegments,               // segment.all.current: cudaMalloc segments; 0 under the VMM policies
  kOoms,                   // num_ooms
  kAllocRetries,           // num_alloc_retries
  kDeviceAllocs,           // num_device_alloc: cudaMalloc, or a map of pages
  kDeviceFrees,            // num_device_free: cudaFree, or an unmap
  kUpdates,                // how many times the slot was written
  kNumFields
};

inline constexpr std::size_t kSlotHeaderWords = 3;  // claimed, sequence, check
inline constexpr std::size_t kSlotWords = kSlotHeaderWords + kNumFields;

// A slot's check word: a mix of its sequence and values that is never 0, so zeros written over
// any part of a slot (a file truncated and grown back) do not pass for a write.
inline std::uint64_t slot_check(std::uint64_t sequence, const std::uint64_t* values) {
  std::uint64_t mix = sequence ^ 0x9e3779b97f4a7c15ULL;
  for (std::size_t i = 0; i < kNumFields; ++i) {
    mix = (mix ^ values[i]) * 0xff51afd7ed558ccdULL;
    mix ^= mix >> 33;
  }
  return mix | 1;
}

struct Header {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t header_bytes;  // sizeof(Header)
  std::uint32_t slot_words;    // kSlotWords
  std::uint32_t device_count;  // slots that follow the header
  std::int64_t pid;
  std::uint64_t start_time;     // the process's start, in clock ticks after boot (/proc/pid/stat)
  char command[kCommandBytes];  // the command line, arguments joined by spaces, NUL-terminated
};
static_assert(sizeof(Header) % sizeof(std::uint64_t) == 0);

inline std::size_t file_bytes(std::uint32_t device_count) {
  return sizeof(Header) + std::size_t{device_count} * kSlotWords * sizeof(std::uint64_t);
}

// The slot of one device, in a mapping of a stats page (writer side).
class SlotWriter {
 public:
  explicit SlotWriter(std::uint64_t* words) : words_(words) {}
  // false when another allocator of the same device publishes there already.
  bool claim();
  // Writes zeros and lets go of the slot.
  void release();
  void publish(const std::uint64_t (&values)[kNumFields]);

 private:
  std::uint64_t* words_;
  std::uint64_t sequence_ = 0;  // the last value written (single writer)
};

// What a reader found in one stats page.
struct DeviceValues {
  int device = 0;
  std::uint64_t values[kNumFields] = {};
};
struct PageContents {
  std::int64_t pid = 0;
  std::uint64_t start_time = 0;
  std::string command;
  std::vector<DeviceValues> devices;  // claimed slots only
  int busy_slots = 0;                 // slots whose writer kept changing them through every attempt
  int corrupt_slots = 0;  // slots whose check does not match their values, with no write going on
};

// The directory of stats pages: $CUDACACHE_STATS_DIR, else /dev/shm.
std::string stats_directory();
// Whether `name` is a stats page's file name (cudacache-<digits>-<digits>).
bool is_page_name(const std::string& name);
// The header of a page, or std::nullopt with *why saying what is wrong (too short, not a stats
// page, another version, header size or slot width, a size that does not match its device count).
std::optional<Header> read_header(int fd, std::string* why);
// The header and every claimed slot of a page (read_header's refusals, or truncated meanwhile).
std::optional<PageContents> read_page(int fd, std::string* why);
// Tests only: `hook(fd)` runs inside read_page after the page is mapped and before its slots are
// read, the moment at which another process's truncation raises SIGBUS. nullptr removes it.
void set_read_page_hook_for_testing(void (*hook)(int fd));
// True when no process holds the page's lock (tested with a non-blocking exclusive flock).
bool is_abandoned(int fd);
// Removes `path`, the name of the open file `fd`, if no process holds its lock: the lock is
// kept while the name is checked to still be that file and removed. False: held, or renamed.
bool remove_if_abandoned(int fd, const std::string& path);
// `text` as valid UTF-8 of at most `limit` bytes (utf8.h's rule: no overlong forms, no
// surrogates): invalid bytes become '?', a character that does not fit whole is left out (JSON
// and Prometheus readers reject anything else).
std::string valid_utf8(const std::string& text, std::size_t limit);
// The command line of this process, for the header (valid UTF-8).
std::string own_command_line();
// The start time of process `pid` in clock ticks after boot, or 0 when it cannot be read.
std::uint64_t process_start_time(long pid);

}  // namespace cudacache::stats_page
