#include "page_scan.h"

#include "memory_figures.h"
#include "stats_page.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace cudacache::top {
namespace {

Row make_row(const stats_page::PageContents& page, const stats_page::DeviceValues& device) {
  using namespace stats_page;
  const auto& v = device.values;
  Row row;
  row.pid = static_cast<long>(page.pid);
  row.command = page.command;
  row.device = device.device;
  row.allocated = v[kAllocatedBytes];
  row.reserved = v[kReservedBytes];
  row.requested = v[kRequestedBytes];
  row.peak_allocated = v[kPeakAllocatedBytes];
  row.peak_reserved = v[kPeakReservedBytes];
  row.cached = row.reserved > row.allocated ? row.reserved - row.allocated : 0;
  row.largest_free = v[kLargestFreeBlockBytes];
  row.fragmentation = fragmentation(row.reserved, row.allocated, row.largest_free);
  row.allocations = v[kAllocations];
  row.segments = v[kSegments];
  row.ooms = v[kOoms];
  row.alloc_retries = v[kAllocRetries];
  row.device_allocs = v[kDeviceAllocs];
  row.device_frees = v[kDeviceFrees];
  return row;
}

// The pid in a page's file name (cudacache-<pid>-<n>).
long pid_of_name(const std::string& name) {
  return std::strtol(name.c_str() + std::strlen("cudacache-"), nullptr, 10);
}

// The n in cudacache-<pid>-<n>: 0, or more for a second copy of the allocator in one process.
// is_page_name allows 19 digits, which an unsigned 64-bit number always holds.
std::uint64_t page_number_of_name(const std::string& name) {
  return std::strtoull(name.c_str() + name.rfind('-') + 1, nullptr, 10);
}

}  // namespace

Scan scan_pages(const std::string& directory, bool remove_abandoned) {
  Scan scan;
  scan.directory = directory;
  DIR* dir = ::opendir(directory.c_str());
  if (dir == nullptr) {
    scan.directory_error = std::strerror(errno);
    scan.notes.push_back("cannot open " + directory + ": " + scan.directory_error);
    return scan;
  }
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(dir)) {
    if (stats_page::is_page_name(entry->d_name)) names.emplace_back(entry->d_name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());

  for (const std::string& name : names) {
    const std::string path = directory + "/" + name;
    const auto skip = [&](const std::string& why) {
      scan.notes.push_back("skipped " + name + ": " + why);
      ++scan.skipped;
    };
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
      if (errno == ENOENT) continue;  // its process exited since the directory was read
      skip(errno == ELOOP ? std::string("a symbolic link, not a stats page")
                          : std::string("cannot be opened: ") + std::strerror(errno));
      continue;
    }
    struct stat info {};
    if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
      skip("not a regular file");
      ::close(fd);
      continue;
    }
    if (info.st_uid != ::geteuid()) {
      skip("belongs to another user (uid " + std::to_string(info.st_uid) + ")");
      ::close(fd);
      continue;
    }
    // The header alone first: an abandoned page is dealt with before its slots are read.
    std::string why;
    const auto header = stats_page::read_header(fd, &why);
    if (!header) {
      skip(why);
      ::close(fd);
      continue;
    }
    if (header->pid != pid_of_name(name)) {
      skip("its header names pid " + std::to_string(header->pid));
      ::close(fd);
      continue;
    }
    if (stats_page::is_abandoned(fd)) {
      const std::string owner =
          "pid " + std::to_string(header->pid) + ", " +
          stats_page::valid_utf8(header->command, stats_page::kCommandBytes - 1);
      if (remove_abandoned && stats_page::remove_if_abandoned(fd, path)) {
        scan.notes.push_back("removed " + name + ": its process (" + owner + ") has exited");
        ++scan.removed;
      } else {
        scan.notes.push_back("abandoned " + name + ": its process (" + owner + ") has exited");
      }
      ::close(fd);
      continue;
    }
    const auto page = stats_page::read_page(fd, &why);
    ::close(fd);
    if (!page) {
      skip(why);
      continue;
    }
    ++scan.processes;
    if (page->busy_slots > 0) {
      scan.notes.push_back(name + ": " + std::to_string(page->busy_slots) +
                           " device(s) changing too fast to read, left out this time");
    }
    if (page->corrupt_slots > 0) {
      scan.notes.push_back(name + ": " + std::to_string(page->corrupt_slots) +
                           " device(s) corrupt (values that do not match their check word), "
                           "left out");
    }
    for (const auto& device : page->devices) {
      scan.rows.push_back(make_row(*page, device));
      scan.rows.back().page = page_number_of_name(name);
    }
  }
  return scan;
}

}  // namespace cudacache::top
