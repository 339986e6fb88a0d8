#include "stats_page.h"

#include "utf8.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csetjmp>
#include <csignal>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>

namespace cudacache::stats_page {
namespace {

using Word = std::atomic_ref<std::uint64_t>;
static_assert(Word::is_always_lock_free, "the page is shared between processes");

// A seqlock read of one slot: a few nanoseconds between the two loads of the sequence, so that
// even an allocator publishing in a tight loop is caught between two writes.
constexpr int kReadAttempts = 100000;
// Reads whose sequence was even and unchanged around the values, yet whose check did not match,
// before the slot is called corrupt. One proves it already (no write was in progress); the
// second read is cheap insurance, and spares the 100,000 attempts a busy slot gets.
constexpr int kMismatchesForCorrupt = 2;

enum class SlotRead { kWhole, kBusy, kCorrupt };

SlotRead read_slot(std::uint64_t* words, DeviceValues* out) {
  int mismatches = 0;
  for (int attempt = 0; attempt < kReadAttempts; ++attempt) {
    const std::uint64_t before = Word(words[1]).load(std::memory_order_acquire);
    // Odd: a write in progress. 0: claimed and not yet written (claim() publishes right after
    // it claims), or zeroed by a truncation; either way no write to check, so busy, not corrupt.
    if (before % 2 != 0 || before == 0) continue;
    // Acquire loads (no fence: ThreadSanitizer does not model fences): the second load of
    // the sequence cannot move before them.
    for (std::size_t i = 0; i < kNumFields; ++i) {
      out->values[i] = Word(words[kSlotHeaderWords + i]).load(std::memory_order_acquire);
    }
    const std::uint64_t check = Word(words[2]).load(std::memory_order_acquire);
    if (Word(words[1]).load(std::memory_order_relaxed) != before) continue;
    if (check == slot_check(before, out->values)) return SlotRead::kWhole;
    if (++mismatches == kMismatchesForCorrupt) return SlotRead::kCorrupt;
  }
  return SlotRead::kBusy;
}

// A file truncated under the reader's mapping raises SIGBUS on the next access: the reader
// jumps out instead of crashing. The handler is installed once; a SIGBUS outside a read goes to
// the handler that was there before (or the default action).
thread_local sigjmp_buf* t_truncated = nullptr;
struct sigaction g_previous_sigbus {};

void on_sigbus(int signal, siginfo_t* info, void* context) {
  if (t_truncated != nullptr) siglongjmp(*t_truncated, 1);
  if ((g_previous_sigbus.sa_flags & SA_SIGINFO) != 0 && g_previous_sigbus.sa_sigaction != nullptr) {
    g_previous_sigbus.sa_sigaction(signal, info, context);
    return;
  }
  if (g_previous_sigbus.sa_handler != SIG_DFL && g_previous_sigbus.sa_handler != SIG_IGN &&
      g_previous_sigbus.sa_handler != nullptr) {
    g_previous_sigbus.sa_handler(signal);
    return;
  }
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

void install_sigbus_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, &g_previous_sigbus);
  });
}

void read_slots(std::uint64_t* slots, std::uint32_t device_count, PageContents* contents) {
  for (std::uint32_t device = 0; device < device_count; ++device) {
    std::uint64_t* words = slots + std::size_t{device} * kSlotWords;
    if (Word(words[0]).load(std::memory_order_acquire) == 0) continue;  // unclaimed
    DeviceValues values;
    values.device = static_cast<int>(device);
    switch (read_slot(words, &values)) {
      case SlotRead::kWhole: contents->devices.push_back(values); break;
      case SlotRead::kBusy: ++contents->busy_slots; break;
      case SlotRead::kCorrupt: ++contents->corrupt_slots; break;
    }
  }
}

std::atomic<void (*)(int)> g_read_page_hook{nullptr};

// read_slots with SIGBUS caught; false when the file was truncated meanwhile.
bool read_slots_guarded(std::uint64_t* slots, std::uint32_t device_count, PageContents* contents) {
  install_sigbus_handler();
  sigjmp_buf jump;
  volatile bool complete = false;  // set after sigsetjmp: volatile to survive the jump
  if (sigsetjmp(jump, 1) == 0) {
    t_truncated = &jump;
    read_slots(slots, device_count, contents);
    complete = true;
  }
  t_truncated = nullptr;
  return complete;
}

}  // namespace

std::string valid_utf8(const std::string& text, std::size_t limit) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    // utf8.h's rule, the JSON writers': an overlong form or a surrogate is no character.
    std::size_t length = utf8_sequence_length(text, i);
    const bool valid = length > 0;
    if (!valid) length = 1;
    if (out.size() + length > limit) break;
    if (valid) {
      out.append(text, i, length);
    } else {
      out += '?';
    }
    i += length;
  }
  return out;
}

bool SlotWriter::claim() {
  std::uint64_t expected = 0;
  if (!Word(words_[0]).compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    return false;
  }
  sequence_ = Word(words_[1]).load(std::memory_order_relaxed);
  if (sequence_ % 2 != 0) ++sequence_;  // a previous owner stopped mid-write
  const std::uint64_t zeros[kNumFields] = {};
  publish(zeros);  // a claimed slot always holds a checked write
  return true;
}

void SlotWriter::release() {
  const std::uint64_t zeros[kNumFields] = {};
  publish(zeros);
  Word(words_[0]).store(0, std::memory_order_release);
}

void SlotWriter::publish(const std::uint64_t (&values)[kNumFields]) {
  // The seqlock writer: odd, values, check, even. Release stores of the values keep the odd store
  // before them (no fence: ThreadSanitizer does not model fences); x86 emits plain moves. A
  // reader that saw the same even sequence before and after the values saw no write between.
  Word(words_[1]).store(sequence_ + 1, std::memory_order_relaxed);
  for (std::size_t i = 0; i < kNumFields; ++i) {
    Word(words_[kSlotHeaderWords + i]).store(values[i], std::memory_order_release);
  }
  sequence_ += 2;
  Word(words_[2]).store(slot_check(sequence_, values), std::memory_order_release);
  Word(words_[1]).store(sequence_, std::memory_order_release);
}

std::string stats_directory() {
  const char* directory = std::getenv("CUDACACHE_STATS_DIR");
  return directory != nullptr && *directory != '\0' ? directory : "/dev/shm";
}

bool is_page_name(const std::string& name) {
  const std::string prefix = "cudacache-";
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  std::size_t i = prefix.size();
  const auto digits = [&] {
    const std::size_t start = i;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
    return i > start && i - start <= 19;
  };
  if (!digits() || i >= name.size() || name[i] != '-') return false;
  ++i;
  return digits() && i == name.size();
}

std::optional<Header> read_header(int fd, std::string* why) {
  Header header;
  ssize_t got = 0;
  do {
    got = ::pread(fd, &header, sizeof header, 0);
  } while (got < 0 && errno == EINTR);
  struct stat info {};
  if (got < 0 || ::fstat(fd, &info) != 0) {
    *why = std::string("cannot be read: ") + std::strerror(errno);
    return std::nullopt;
  }
  if (static_cast<std::size_t>(got) < sizeof header) {
    *why = "too short for a stats page (" + std::to_string(info.st_size) + " bytes)";
    return std::nullopt;
  }
  if (header.magic != kMagic) {
    *why = "not a cudacache stats page (wrong magic number)";
    return std::nullopt;
  }
  // The version first: another version may lay out its header differently.
  if (header.version != kVersion) {
    *why = "stats page version " + std::to_string(header.version) + " (this reader knows " +
           std::to_string(kVersion) + ")";
    return std::nullopt;
  }
  if (header.header_bytes != sizeof(Header)) {
    *why = "a header of " + std::to_string(header.header_bytes) + " bytes, where version " +
           std::to_string(kVersion) + " has " + std::to_string(sizeof(Header));
    return std::nullopt;
  }
  if (header.slot_words != kSlotWords) {
    *why = "slots of " + std::to_string(header.slot_words) + " words, where version " +
           std::to_string(kVersion) + " has " + std::to_string(kSlotWords);
    return std::nullopt;
  }
  if (header.device_count > kMaxDevices ||
      static_cast<std::size_t>(info.st_size) != file_bytes(header.device_count)) {
    *why = "size " + std::to_string(info.st_size) + " bytes does not match its " +
           std::to_string(header.device_count) + " devices";
    return std::nullopt;
  }
  header.command[kCommandBytes - 1] = '\0';
  return header;
}

std::optional<PageContents> read_page(int fd, std::string* why) {
  const auto header = read_header(fd, why);
  if (!header) return std::nullopt;
  const std::size_t bytes = file_bytes(header->device_count);
  void* mapping = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (mapping == MAP_FAILED) {
    *why = std::string("cannot be mapped: ") + std::strerror(errno);
    return std::nullopt;
  }
  PageContents contents;
  contents.pid = header->pid;
  contents.start_time = header->start_time;
  contents.command = valid_utf8(header->command, kCommandBytes - 1);
  if (auto* hook = g_read_page_hook.load(std::memory_order_acquire)) hook(fd);
  const bool complete = read_slots_guarded(
      static_cast<std::uint64_t*>(
          static_cast<void*>(static_cast<unsigned char*>(mapping) + sizeof(Header))),
      header->device_count, &contents);
  ::munmap(mapping, bytes);
  if (!complete) {
    *why = "was truncated while it was read";
    return std::nullopt;
  }
  return contents;
}

void set_read_page_hook_for_testing(void (*hook)(int fd)) {
  g_read_page_hook.store(hook, std::memory_order_release);
}

bool is_abandoned(int fd) {
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) return false;  // its process holds it
  ::flock(fd, LOCK_UN);
  return true;
}

bool remove_if_abandoned(int fd, const std::string& path) {
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) return false;  // its process holds it
  // Still holding the lock: the name must still be this file (a process that reuses the pid
  // may have made a new page under the same name meanwhile).
  struct stat open_file {};
  struct stat named {};
  const bool same = ::fstat(fd, &open_file) == 0 && ::lstat(path.c_str(), &named) == 0 &&
                    open_file.st_dev == named.st_dev && open_file.st_ino == named.st_ino;
  const bool removed = same && ::unlink(path.c_str()) == 0;
  ::flock(fd, LOCK_UN);
  return removed;
}

std::string own_command_line() {
  std::ifstream file("/proc/self/cmdline", std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  while (!text.empty() && text.back() == '\0') text.pop_back();
  for (char& c : text) {
    if (c == '\0') c = ' ';
  }
  return valid_utf8(text, kCommandBytes - 1);
}

std::uint64_t process_start_time(long pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(file, line)) return 0;
  // Field 2 (the command) may hold spaces and parentheses: count from the last ')'.
  const std::size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return 0;
}

}  // namespace cudacache::stats_page
