// The stats page (stats_page.h) and its publisher: the reader sees only whole writes, bad files
// are named, liveness is the flock, and an allocator's slot says what its stats say.
#include "stats_page.h"
#include "stats_publisher.h"
#include "test_support.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>

namespace cudacache {
namespace {

using testing::SimulatedDeviceTest;
namespace fs = std::filesystem;
constexpr std::size_t kMiB = std::size_t{1} << 20;

// This process's page goes to a directory of its own (read when the page is created, at the
// first allocator of the process).
const fs::path& page_directory() {
  // Never destroyed: the exit handler registered below runs after the destructors of statics
  // initialized after its registration, this one included (a static path here was removed
  // while destroyed: remove_all of whatever its freed memory then held).
  static const fs::path& directory = *new fs::path([] {
    char name[] = "/tmp/cudacache-stats-page-test-XXXXXX";
    const char* made = ::mkdtemp(name);
    ::setenv("CUDACACHE_STATS_DIR", made != nullptr ? made : "/tmp", 1);
    // Registered before the publisher's own exit handler, so run after it removed the page.
    if (made != nullptr) {
      std::atexit([] {
        const std::string made_path = page_directory().string();
        std::error_code ignored;  // an exception out of an exit handler would abort
        if (made_path.starts_with("/tmp/cudacache-stats-page-test-")) {
          fs::remove_all(made_path, ignored);
        }
      });
    }
    return fs::path(made != nullptr ? made : "/tmp");
  }());
  return directory;
}
const bool g_directory_set = !page_directory().empty();

// A page file of `devices` slots with a valid header, mapped for writing.
struct ScratchPage {
  explicit ScratchPage(std::uint32_t devices, const std::string& name = "scratch") {
    path = page_directory() / name;
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    bytes = stats_page::file_bytes(devices);
    EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(bytes)), 0);
    mapping = static_cast<unsigned char*>(
        ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    stats_page::Header header{};
    header.magic = stats_page::kMagic;
    header.version = stats_page::kVersion;
    header.header_bytes = sizeof header;
    header.slot_words = stats_page::kSlotWords;
    header.device_count = devices;
    header.pid = 4242;
    std::strcpy(header.command, "scratch page");
    std::memcpy(mapping, &header, sizeof header);
  }
  ~ScratchPage() {
    ::munmap(mapping, bytes);
    ::close(fd);
    fs::remove(path);
  }
  std::uint64_t* slot(int device) {
    return reinterpret_cast<std::uint64_t*>(mapping + sizeof(stats_page::Header)) +
           static_cast<std::size_t>(device) * stats_page::kSlotWords;
  }
  std::optional<stats_page::PageContents> read(std::string* why) {
    return stats_page::read_page(fd, why);
  }
  fs::path path;
  int fd = -1;
  std::size_t bytes = 0;
  unsigned char* mapping = nullptr;
};

// Command lines go out as JSON and Prometheus labels: each byte that strict readers refuse is a
// '?', overlong forms and surrogates included (they passed before: only their shape was
// checked), and a character that does not fit the limit whole is left out.
TEST(StatsPage, CommandLinesAreStrictUtf8) {
  EXPECT_EQ(stats_page::valid_utf8("a\xc0\x80"
                                   "b\xed\xa0\x80"
                                   "c\xe9",
                                   100),
            "a??b???c?");
  EXPECT_EQ(stats_page::valid_utf8("caf\xc3\xa9", 100), "caf\xc3\xa9");
  EXPECT_EQ(stats_page::valid_utf8("caf\xc3\xa9", 4), "caf");
}

TEST(StatsPage, PageNamesArePrefixPidAndNumber) {
  EXPECT_TRUE(stats_page::is_page_name("cudacache-123-0"));
  EXPECT_TRUE(stats_page::is_page_name("cudacache-4194304-12"));
  for (const char* name :
       {"cudacache-123", "cudacache--0", "cudacache-12a-0", "cudacache-1-0x", ".cudacache-1-0",
        "cudacache-1-", "other-1-0", "cudacache-12345678901234567890-0"}) {
    EXPECT_FALSE(stats_page::is_page_name(name)) << name;
  }
}

// One writer publishes values that are all equal to its round number while a reader copies the
// page as fast as it can: a slot read with mixed values would be a torn write let through.
TEST(StatsPage, ReaderSeesOnlyWholeWrites) {
  ScratchPage page(2);
  stats_page::SlotWriter writer(page.slot(1));
  ASSERT_TRUE(writer.claim());
  // A jthread: stopped and joined even when an assertion returns early.
  std::jthread publisher([&](std::stop_token stop) {
    std::uint64_t values[stats_page::kNumFields];
    for (std::uint64_t round = 1; !stop.stop_requested(); ++round) {
      for (auto& value : values) value = round;
      writer.publish(values);
    }
  });
  std::uint64_t last = 0;
  int changes = 0;
  // At least 3000 reads, and on until the writer was seen to move (it may not have been
  // scheduled yet on a loaded machine).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int reads = 0; reads < 3000 || (changes < 2 && std::chrono::steady_clock::now() < give_up);
       ++reads) {
    std::string why;
    const auto contents = page.read(&why);
    ASSERT_TRUE(contents.has_value()) << why;
    for (const auto& device : contents->devices) {
      ASSERT_EQ(device.device, 1);
      for (const std::uint64_t value : device.values) ASSERT_EQ(value, device.values[0]);
      ASSERT_GE(device.values[0], last);
      if (device.values[0] != last) ++changes;
      last = device.values[0];
    }
  }
  publisher.request_stop();
  publisher.join();
  EXPECT_GT(changes, 0);
  writer.release();
  std::string why;
  EXPECT_TRUE(page.read(&why)->devices.empty());  // a released slot is not a device in use
}

TEST(StatsPage, ASlotHasOneWriter) {
  ScratchPage page(1);
  stats_page::SlotWriter first(page.slot(0));
  stats_page::SlotWriter second(page.slot(0));
  EXPECT_TRUE(first.claim());
  EXPECT_FALSE(second.claim());
  first.release();
  EXPECT_TRUE(second.claim());
}

TEST(StatsPage, BadFilesAreRefusedWithTheReason) {
  std::string why;
  {
    ScratchPage page(1);
    ASSERT_EQ(::ftruncate(page.fd, 16), 0);
    EXPECT_FALSE(page.read(&why));
    EXPECT_NE(why.find("too short"), std::string::npos) << why;
  }
  {
    ScratchPage page(1);
    page.mapping[0] ^= 0xff;
    EXPECT_FALSE(page.read(&why));
    EXPECT_NE(why.find("not a cudacache stats page"), std::string::npos) << why;
  }
  {
    ScratchPage page(1);
    reinterpret_cast<stats_page::Header*>(page.mapping)->version = 99;
    EXPECT_FALSE(page.read(&why));
    EXPECT_NE(why.find("version 99"), std::string::npos) << why;
  }
  // Of the same version, a header or slots of another size name the field that differs.
  {
    ScratchPage page(1);
    reinterpret_cast<stats_page::Header*>(page.mapping)->header_bytes += 8;
    EXPECT_FALSE(page.read(&why));
    EXPECT_NE(why.find("a header of " + std::to_string(sizeof(stats_page::Header) + 8) +
                       " bytes, where version 2 has " + std::to_string(sizeof(stats_page::Header))),
              std::string::npos)
        << why;
  }
  {
    ScratchPage page(1);
    reinterpret_cast<stats_page::Header*>(page.mapping)->slot_words = 99;
    EXPECT_FALSE(page.read(&why));
    EXPECT_NE(why.find("slots of 99 words, where version 2 has " +
                       std::to_string(stats_page::kSlotWords)),
              std::string::npos)
        << why;
  }
  {
    ScratchPage page(1);
    reinterpret_cast<stats_page::Header*>(page.mapping)->device_count = 3;
    EXPECT_FALSE(page.read(&why));
    EXPECT_NE(why.find("does not match its 3 devices"), std::string::npos) << why;
  }
}

// Claims every slot of `page` and publishes {1, 2, 3, 0...} in each (the truncation tests).
void publish_every_slot(ScratchPage& page) {
  const auto devices = reinterpret_cast<const stats_page::Header*>(page.mapping)->device_count;
  for (std::uint32_t device = 0; device < devices; ++device) {
    stats_page::SlotWriter writer(page.slot(static_cast<int>(device)));
    ASSERT_TRUE(writer.claim());
    const std::uint64_t values[stats_page::kNumFields] = {1, 2, 3};
    writer.publish(values);
  }
}

// Another process of the same user may truncate a page under a reader's mapping (SIGBUS on
// access). Truncated after the reader checked its size and mapped it, the file is reported as
// truncated, and a later read of the restored file succeeds (the guard is left clean).
TEST(StatsPage, FileTruncatedAfterMappingIsReportedNotACrash) {
  ScratchPage page(64);
  ASSERT_NO_FATAL_FAILURE(publish_every_slot(page));
  stats_page::set_read_page_hook_for_testing([](int fd) {
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(sizeof(stats_page::Header))), 0);
  });
  std::string why;
  const auto contents = page.read(&why);
  stats_page::set_read_page_hook_for_testing(nullptr);
  EXPECT_FALSE(contents);
  EXPECT_NE(why.find("was truncated while it was read"), std::string::npos) << why;

  ASSERT_EQ(::ftruncate(page.fd, static_cast<off_t>(page.bytes)), 0);
  // The slots beyond the header were zeroed by the truncation: a valid page with no devices.
  const auto again = page.read(&why);
  ASSERT_TRUE(again) << why;
  EXPECT_TRUE(again->devices.empty());
}

// A file truncated at any byte of a slot and grown back has zeros from there on: unless every
// byte overwritten was zero already, the slot's check refuses it (a busy slot, or absent once
// its claimed word is gone). Before the check word, zeros over the values of a slot whose
// sequence survived passed for a write of zeros.
TEST(StatsPage, SlotZeroedFromAnyByteIsNeverReportedAsAWrite) {
  ScratchPage page(4);
  ASSERT_NO_FATAL_FAILURE(publish_every_slot(page));
  constexpr std::size_t kSlotBytes = stats_page::kSlotWords * sizeof(std::uint64_t);
  const std::size_t slot_start = sizeof(stats_page::Header) + 2 * kSlotBytes;  // device 2
  int whole_reads = 0;
  int refused_reads = 0;
  for (std::size_t cut = 0; cut < kSlotBytes; ++cut) {
    SCOPED_TRACE("cut at byte " + std::to_string(cut) + " of the slot");
    unsigned char before[kSlotBytes];
    std::memcpy(before, page.mapping + slot_start, kSlotBytes);
    bool changed = false;
    for (std::size_t i = cut; i < kSlotBytes; ++i) changed = changed || before[i] != 0;
    ASSERT_EQ(::ftruncate(page.fd, static_cast<off_t>(slot_start + cut)), 0);
    ASSERT_EQ(::ftruncate(page.fd, static_cast<off_t>(page.bytes)), 0);
    std::string why;
    const auto contents = page.read(&why);
    ASSERT_TRUE(contents) << why;
    bool reported = false;
    for (const auto& device : contents->devices) {
      ASSERT_LT(device.device, 3);  // device 3's slot is all zeros: unclaimed
      if (device.device != 2) continue;
      reported = true;
      const std::uint64_t expected[stats_page::kNumFields] = {1, 2, 3};
      for (std::size_t i = 0; i < stats_page::kNumFields; ++i) {
        ASSERT_EQ(device.values[i], expected[i]) << "field " << i;
      }
    }
    EXPECT_EQ(reported, !changed);
    // Zeros over the sequence (cut within bytes 1 to 8: byte 0 holds claimed's 1) leave a slot
    // that looks claimed and never written: busy. Zeros after it change no write in progress:
    // corrupt.
    const bool sequence_zeroed = cut > 0 && cut <= 8;
    EXPECT_EQ(contents->busy_slots, changed && sequence_zeroed ? 1 : 0);
    EXPECT_EQ(contents->corrupt_slots, changed && cut > 8 ? 1 : 0);
    (reported ? whole_reads : refused_reads) += 1;
    // The next cut starts from a whole slot again.
    std::atomic_ref<std::uint64_t>(page.slot(2)[0]).store(0);
    stats_page::SlotWriter writer(page.slot(2));
    ASSERT_TRUE(writer.claim());
    const std::uint64_t values[stats_page::kNumFields] = {1, 2, 3};
    writer.publish(values);
  }
  // Both outcomes were seen: the zeros after field 2 are whole, a cut in the check is refused.
  EXPECT_GT(whole_reads, 0);
  EXPECT_GT(refused_reads, 0);
}

// A slot whose check does not match its values while no write is going on (its sequence even
// and steady) is corrupt: said so, and not retried as if its writer were busy. A slot left
// odd by its writer is busy. Neither is reported as values.
TEST(StatsPage, CorruptAndBusySlotsAreToldApart) {
  ScratchPage page(3);
  ASSERT_NO_FATAL_FAILURE(publish_every_slot(page));
  page.slot(0)[2] ^= std::uint64_t{1} << 40;            // device 0's check
  page.slot(1)[stats_page::kSlotHeaderWords + 1] += 1;  // device 1's second value
  page.slot(2)[1] += 1;  // device 2's sequence, odd: a write never ended
  std::string why;
  const auto contents = page.read(&why);
  ASSERT_TRUE(contents) << why;
  EXPECT_TRUE(contents->devices.empty());
  EXPECT_EQ(contents->corrupt_slots, 2);
  EXPECT_EQ(contents->busy_slots, 1);
  // Claimed and not yet written (claim() stores the claim before its first publish): busy for
  // the moment, never corrupt.
  ScratchPage fresh(1, "fresh");
  std::atomic_ref<std::uint64_t>(fresh.slot(0)[0]).store(1);
  const auto claimed = fresh.read(&why);
  ASSERT_TRUE(claimed) << why;
  EXPECT_TRUE(claimed->devices.empty());
  EXPECT_EQ(claimed->corrupt_slots, 0);
  EXPECT_EQ(claimed->busy_slots, 1);
}

// The same truncation raced from another thread at every moment the scheduler picks: each
// read is whole or refused by name (size mismatch or truncated), never a crash.
TEST(StatsPage, FileTruncatedConcurrentlyIsReportedNotACrash) {
  ScratchPage page(64);
  ASSERT_NO_FATAL_FAILURE(publish_every_slot(page));
  const std::size_t full = page.bytes;
  const int fd = page.fd;
  std::atomic<int> truncations{0};
  std::jthread truncator([&](std::stop_token stop) {
    while (!stop.stop_requested()) {
      if (::ftruncate(fd, static_cast<off_t>(full / 3)) != 0) return;
      if (::ftruncate(fd, static_cast<off_t>(full)) != 0) return;
      truncations.fetch_add(1, std::memory_order_relaxed);
    }
  });
  int whole = 0;
  int refused = 0;
  // At least 3000 reads, and on until the truncator has run a few times (it may start late
  // on a loaded machine).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int read = 0;
       read < 3000 || (truncations.load() < 10 && std::chrono::steady_clock::now() < give_up);
       ++read) {
    std::string why;
    const auto contents = page.read(&why);
    if (contents) {
      ++whole;
      for (const auto& device : contents->devices) ASSERT_EQ(device.values[0], 1u);
    } else {
      ++refused;
      ASSERT_TRUE(why.find("truncated") != std::string::npos ||
                  why.find("does not match") != std::string::npos)
          << why;
    }
  }
  truncator.request_stop();
  truncator.join();
  EXPECT_GT(truncations.load(), 0);
  RecordProperty("whole_reads", whole);
  RecordProperty("refused_reads", refused);
}

TEST(StatsPage, AbandonedOnceNoOpenFileHoldsTheLock) {
  ScratchPage page(1);
  const int holder = ::open(page.path.c_str(), O_RDONLY);
  ASSERT_GE(holder, 0);
  ASSERT_EQ(::flock(holder, LOCK_SH), 0);
  EXPECT_FALSE(stats_page::is_abandoned(page.fd));
  ::close(holder);
  EXPECT_TRUE(stats_page::is_abandoned(page.fd));
}

TEST(StatsPage, StartTimeOfThisProcessIsKnown) {
  EXPECT_GT(stats_page::process_start_time(::getpid()), 0u);
  EXPECT_EQ(stats_page::process_start_time(-1), 0u);
  EXPECT_FALSE(stats_page::own_command_line().empty());
}

class StatsPublisherTest : public SimulatedDeviceTest {
 protected:
  // The values of `device` in this process's page after every allocator wrote its slot, or
  // nullopt when no allocator publishes.
  std::optional<stats_page::DeviceValues> published(int device) {
    stats_publisher::publish_now();
    return read_slot(device);
  }

  std::optional<stats_page::DeviceValues> read_slot(int device) {
    const std::string path = stats_publisher::page_path();
    EXPECT_FALSE(path.empty());
    const int fd = ::open(path.c_str(), O_RDONLY);
    EXPECT_GE(fd, 0) << path;
    std::string why;
    const auto contents = stats_page::read_page(fd, &why);
    EXPECT_FALSE(stats_page::is_abandoned(fd)) << "this process holds its own page";
    ::close(fd);
    EXPECT_TRUE(contents.has_value()) << why;
    if (!contents) return std::nullopt;
    EXPECT_EQ(contents->pid, ::getpid());
    for (const auto& values : contents->devices) {
      if (values.device == device) return values;
    }
    return std::nullopt;
  }

  static void expect_matches(const stats_page::DeviceValues& page, const MemoryStats& stats) {
    using namespace stats_page;
    EXPECT_EQ(page.values[kAllocatedBytes],
              static_cast<std::uint64_t>(stats.allocated_bytes[kAllPools].current));
    EXPECT_EQ(page.values[kReservedBytes],
              static_cast<std::uint64_t>(stats.reserved_bytes[kAllPools].current));
    EXPECT_EQ(page.values[kRequestedBytes],
              static_cast<std::uint64_t>(stats.requested_bytes[kAllPools].current));
    EXPECT_EQ(page.values[kPeakAllocatedBytes],
              static_cast<std::uint64_t>(stats.allocated_bytes[kAllPools].peak));
    EXPECT_EQ(page.values[kPeakReservedBytes],
              static_cast<std::uint64_t>(stats.reserved_bytes[kAllPools].peak));
    EXPECT_EQ(page.values[kAllocations],
              static_cast<std::uint64_t>(stats.allocation[kAllPools].current));
    EXPECT_EQ(page.values[kOoms], static_cast<std::uint64_t>(stats.num_ooms));
    EXPECT_EQ(page.values[kDeviceAllocs], static_cast<std::uint64_t>(stats.num_device_alloc));
    EXPECT_EQ(page.values[kDeviceFrees], static_cast<std::uint64_t>(stats.num_device_free));
  }

  // The largest inactive block of the snapshot: what kLargestFreeBlockBytes must say.
  static std::uint64_t largest_free_in_snapshot(const DeviceAllocator& allocator) {
    std::uint64_t largest = 0;
    for (const auto& segment : allocator.snapshot().segments) {
      for (const auto& block : segment.blocks) {
        if (std::string(block.state) == "inactive")
          largest = std::max<std::uint64_t>(largest, block.size);
      }
    }
    return largest;
  }
};

TEST_F(StatsPublisherTest, AllocatorPublishesWhatItsStatsSayAfterEveryKindOfCall) {
  for (const char* config : {"", "policy:pytorch"}) {
    SCOPED_TRACE(config);
    DeviceAllocator allocator(0, Options(config));
    std::vector<void*> blocks;
    for (std::size_t size :
         {3 * kMiB, 512 * std::size_t{1024}, 30 * kMiB, 5 * kMiB, std::size_t{700}}) {
      blocks.push_back(allocator.allocate(size, nullptr));
      auto page = published(0);
      ASSERT_TRUE(page.has_value());
      expect_matches(*page, allocator.stats());
    }
    allocator.deallocate(blocks[2]);
    allocator.deallocate(blocks[0]);
    auto page = published(0);
    ASSERT_TRUE(page.has_value());
    expect_matches(*page, allocator.stats());
    EXPECT_EQ(page->values[stats_page::kLargestFreeBlockBytes],
              largest_free_in_snapshot(allocator));
    EXPECT_GE(page->values[stats_page::kLargestFreeBlockBytes], 30 * kMiB);

    EXPECT_THROW(allocator.allocate(std::size_t{1} << 40, nullptr), OutOfMemoryError);
    page = published(0);
    ASSERT_TRUE(page.has_value());
    EXPECT_EQ(page->values[stats_page::kOoms], 1u);
    expect_matches(*page, allocator.stats());

    allocator.empty_cache();
    allocator.reset_peak_stats();
    page = published(0);
    ASSERT_TRUE(page.has_value());
    expect_matches(*page, allocator.stats());
    EXPECT_EQ(page->values[stats_page::kLargestFreeBlockBytes],
              largest_free_in_snapshot(allocator));
    for (void* p : {blocks[1], blocks[3], blocks[4]}) allocator.deallocate(p);
  }
  EXPECT_FALSE(published(0).has_value()) << "a destroyed allocator lets go of its slot";
}

TEST_F(StatsPublisherTest, OneAllocatorPerDevicePublishesAndTheOptionTurnsItOff) {
  DeviceAllocator first(0, Options());
  void* p = first.allocate(4 * kMiB, nullptr);
  {
    DeviceAllocator second(0, Options());  // the slot is taken: it runs without publishing
    void* q = second.allocate(8 * kMiB, nullptr);
    auto page = published(0);
    ASSERT_TRUE(page.has_value());
    EXPECT_EQ(page->values[stats_page::kAllocatedBytes], 4 * kMiB);
    second.deallocate(q);
  }
  first.deallocate(p);
  DeviceAllocator off(0, Options("publish_stats:False"));
  EXPECT_EQ(off.options().publish_stats.enabled, false);
  auto page = published(0);
  ASSERT_TRUE(page.has_value());
  EXPECT_EQ(page->values[stats_page::kAllocatedBytes], 0u);  // still the first one's slot
}

// Nothing on the allocation path writes the page: the publisher's thread does, within a few
// intervals.
TEST_F(StatsPublisherTest, PublisherThreadWritesWithinAFewIntervals) {
  DeviceAllocator allocator(0, Options());
  void* p = allocator.allocate(6 * kMiB, nullptr);
  // Normally within one interval; 100 of them leave room for a loaded machine.
  const auto deadline = std::chrono::steady_clock::now() + 100 * stats_publisher::kInterval;
  std::uint64_t seen = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    const auto page = read_slot(0);
    ASSERT_TRUE(page.has_value());
    seen = page->values[stats_page::kAllocatedBytes];
    if (seen == 6 * kMiB) break;
    std::this_thread::sleep_for(stats_publisher::kInterval / 4);
  }
  EXPECT_EQ(seen, 6 * kMiB);
  allocator.deallocate(p);
}

TEST_F(StatsPublisherTest, PageIsPrivateToThisUser) {
  DeviceAllocator allocator(0, Options());
  const fs::path path = stats_publisher::page_path();
  ASSERT_FALSE(path.empty());
  EXPECT_EQ(path.parent_path(), page_directory());
  const auto permissions = fs::status(path).permissions();
  EXPECT_EQ(permissions, fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_TRUE(stats_page::is_page_name(path.filename().string()));
}

}  // namespace
}  // namespace cudacache
