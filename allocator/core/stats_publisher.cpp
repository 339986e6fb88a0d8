#include "stats_publisher.h"

#include "log.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

namespace cudacache::stats_publisher {
namespace {

struct Page {
  std::mutex mutex;
  bool failed = false;  // creation failed once: not tried again
  void* mapping = nullptr;
  std::size_t bytes = 0;
  std::uint32_t device_count = 0;
  int fd = -1;
  pid_t owner = 0;  // the process that created it (a forked child is not)
  std::string path;
  bool exit_handlers_installed = false;
};

Page& page() {
  static auto* instance = new Page;  // never destroyed: allocators may publish during exit
  return *instance;
}

// The sources and the thread that calls them. Lock order: Sources::mutex, then an
// allocator's own mutex (inside publish).
struct Source {
  void* owner;
  void (*publish)(void*);
};
struct Sources {
  std::mutex mutex;
  std::condition_variable wake;
  std::vector<Source> list;
  bool thread_running = false;
  bool stopped = false;  // at exit: no call after this
};

Sources& sources() {
  static auto* instance = new Sources;  // never destroyed, as page()
  return *instance;
}

void publish_all(Sources& s) {
  for (const Source& source : s.list) source.publish(source.owner);
}

void publisher_thread() {
  Sources& s = sources();
  std::unique_lock<std::mutex> lock(s.mutex);
  while (!s.stopped) {
    s.wake.wait_for(lock, kInterval);
    if (!s.stopped) publish_all(s);
  }
}

std::string errno_text() { return std::strerror(errno); }

// The pid in "cudacache-<pid>-<n>" or ".cudacache-<pid>-XXXXXX" (0 when there is none).
long pid_in_name(const std::string& name) {
  const std::string prefix = name[0] == '.' ? ".cudacache-" : "cudacache-";
  if (name.compare(0, prefix.size(), prefix) != 0) return 0;
  return std::strtol(name.c_str() + prefix.size(), nullptr, 10);
}

// A valid page of this user whose header names the pid in its name.
bool is_own_page(int fd, const std::string& name) {
  struct stat info {};
  std::string why;
  const auto header = stats_page::read_header(fd, &why);
  return ::fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && info.st_uid == ::geteuid() && header &&
         header->pid == pid_in_name(name);
}

// Removes this user's pages that no process holds, and the temporary files of processes that
// died while creating theirs. Files that are not valid pages stay.
void remove_abandoned_pages(const std::string& directory) {
  DIR* dir = ::opendir(directory.c_str());
  if (dir == nullptr) return;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    const std::string path = directory + "/" + name;
    if (name.compare(0, 11, ".cudacache-") == 0) {
      const long pid = pid_in_name(name);
      struct stat info {};
      if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH &&
          ::lstat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
          info.st_uid == ::geteuid()) {
        ::unlink(path.c_str());
      }
      continue;
    }
    if (!stats_page::is_page_name(name)) continue;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) continue;
    if (is_own_page(fd, name) && stats_page::remove_if_abandoned(fd, path)) {
      logger().debug("stats page: removed the abandoned {}", path);
    }
    ::close(fd);
  }
  ::closedir(dir);
}

void remove_at_exit() {
  {
    // The thread makes no call after this; it is not joined (the process is ending, and a
    // detached thread cannot be joined).
    Sources& s = sources();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.stopped = true;
    s.list.clear();
    s.wake.notify_all();
  }
  Page& p = page();
  std::lock_guard<std::mutex> lock(p.mutex);
  if (p.mapping != nullptr && p.owner == ::getpid()) ::unlink(p.path.c_str());
}

// Around fork: the sources' lock is taken first, so that the publisher's thread holds no
// allocator's lock at the moment of the fork (the child would inherit it locked for ever).
void before_fork() { sources().mutex.lock(); }
void after_fork_in_parent() { sources().mutex.unlock(); }

// In a forked child: the parent's page is not ours. Writes of inherited allocators go to
// private memory at the same address; a new allocator makes a new page.
void detach_in_child() {
  Page& p = page();
  // The fork happened in another thread's critical section at worst: the child has one thread,
  // so the mutexes are re-created rather than taken, and the publisher's thread is gone.
  new (&p.mutex) std::mutex;
  Sources& s = sources();
  new (&s.mutex) std::mutex;  // held by before_fork: the child's copy is made anew
  new (&s.wake) std::condition_variable;
  s.thread_running = false;
  s.list.clear();  // the inherited allocators write to private memory now
  if (p.mapping == nullptr) return;
  ::mmap(p.mapping, p.bytes, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1,
         0);
  ::close(p.fd);
  p.mapping = nullptr;
  p.fd = -1;
  p.path.clear();
  p.failed = false;
}

// Writes the header and publishes the file under its final name; false (logged) on failure.
bool create(Page& p, std::uint32_t device_count) {
  const std::string directory = stats_page::stats_directory();
  remove_abandoned_pages(directory);
  const long pid = static_cast<long>(::getpid());
  std::string temporary = directory + "/.cudacache-" + std::to_string(pid) + "-XXXXXX";
  const int fd = ::mkostemp(temporary.data(), O_CLOEXEC);
  if (fd < 0) {
    logger().warn("stats page: cannot create a file in {}: {}; not publishing", directory,
                  errno_text());
    return false;
  }
  const std::size_t bytes = stats_page::file_bytes(device_count);
  void* mapping = MAP_FAILED;
  const auto fail = [&](const char* what) {
    logger().warn("stats page: {} of {} failed: {}; not publishing", what, temporary, errno_text());
    if (mapping != MAP_FAILED) ::munmap(mapping, bytes);
    ::unlink(temporary.c_str());
    ::close(fd);
    return false;
  };
  if (::fchmod(fd, S_IRUSR | S_IWUSR) != 0) return fail("fchmod");
  // Blocks allocated now: a sparse file on a full tmpfs would fault (SIGBUS) at first write.
  errno = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (errno != 0) return fail("posix_fallocate");
  if (::flock(fd, LOCK_SH) != 0) return fail("flock");
  mapping = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapping == MAP_FAILED) return fail("mmap");

  stats_page::Header header{};
  header.magic = stats_page::kMagic;
  header.version = stats_page::kVersion;
  header.header_bytes = sizeof(stats_page::Header);
  header.slot_words = stats_page::kSlotWords;
  header.device_count = device_count;
  header.pid = pid;
  header.start_time = stats_page::process_start_time(pid);
  const std::string command = stats_page::own_command_line();
  std::strncpy(header.command, command.c_str(), stats_page::kCommandBytes - 1);
  std::memcpy(mapping, &header, sizeof header);

  // cudacache-<pid>-<n>: n > 0 only when another copy of the allocator in this process (the
  // preload beside libcudacache.so) has a page already. link() never replaces a file.
  std::string path;
  for (int n = 0;; ++n) {
    path = directory + "/cudacache-" + std::to_string(pid) + "-" + std::to_string(n);
    if (::link(temporary.c_str(), path.c_str()) == 0) break;
    if (errno != EEXIST || n > 64) return fail("link");
    // A file of a dead process whose pid this one reuses: removed, the name taken again.
    const int existing = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (existing >= 0) {
      const std::string name = path.substr(directory.size() + 1);
      const bool removed =
          is_own_page(existing, name) && stats_page::remove_if_abandoned(existing, path);
      ::close(existing);
      if (removed) --n;
    }
  }
  ::unlink(temporary.c_str());
  p.mapping = mapping;
  p.bytes = bytes;
  p.device_count = device_count;
  p.fd = fd;
  p.owner = ::getpid();
  p.path = path;
  if (!p.exit_handlers_installed) {
    std::atexit(remove_at_exit);
    ::pthread_atfork(before_fork, after_fork_in_parent, detach_in_child);
    p.exit_handlers_installed = true;
  }
  logger().info("stats page: publishing in {}", path);
  return true;
}

}  // namespace

std::optional<stats_page::SlotWriter> claim(int device, int device_count) {
  if (device < 0 || device_count <= 0) return std::nullopt;
  Page& p = page();
  std::lock_guard<std::mutex> lock(p.mutex);
  if (p.mapping == nullptr) {
    if (p.failed) return std::nullopt;
    if (!create(p, static_cast<std::uint32_t>(device_count))) {
      p.failed = true;
      return std::nullopt;
    }
  }
  if (static_cast<std::uint32_t>(device) >= p.device_count) return std::nullopt;
  auto* words = reinterpret_cast<std::uint64_t*>(static_cast<unsigned char*>(p.mapping) +
                                                 sizeof(stats_page::Header)) +
                static_cast<std::size_t>(device) * stats_page::kSlotWords;
  stats_page::SlotWriter writer(words);
  if (!writer.claim()) return std::nullopt;
  return writer;
}

void add_source(void* owner, void (*publish)(void*)) {
  Sources& s = sources();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.stopped) return;
  s.list.push_back({owner, publish});
  if (!s.thread_running) {
    try {
      std::thread(publisher_thread).detach();
      s.thread_running = true;
    } catch (const std::system_error& e) {
      logger().warn("stats page: cannot start the publisher's thread: {}", e.what());
    }
  }
}

void remove_source(void* owner) {
  Sources& s = sources();
  std::lock_guard<std::mutex> lock(s.mutex);  // a call in progress holds it
  s.list.erase(std::remove_if(s.list.begin(), s.list.end(),
                              [owner](const Source& source) { return source.owner == owner; }),
               s.list.end());
}

void publish_now() {
  Sources& s = sources();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.stopped) publish_all(s);
}

std::string page_path() {
  Page& p = page();
  std::lock_guard<std::mutex> lock(p.mutex);
  return p.mapping != nullptr ? p.path : std::string();
}

}  // namespace cudacache::stats_publisher
