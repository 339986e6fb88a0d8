// Configuration from the environment, read when the library is loaded:
//   CUDASIM_DEVICES   number of simulated devices, 1..64 (default 1)
//   CUDASIM_CAPACITY  bytes per device: a number with an optional suffix K/M/G/T or KiB/MiB/
//                     GiB/TiB (powers of 2) or KB/MB/GB/TB (powers of 10) (default 80GiB)
//   CUDASIM_REPORT    1: print one summary line to stderr at exit
//   CUDASIM_VERBOSE   1: log to stderr every driver function looked up by name
//                     (cudaGetDriverEntryPoint*, cuGetProcAddress) that cudasim lacks
//   CUDASIM_VMM       0: no device supports the driver's VMM API (default 1: all do)
//   CUDASIM_FAIL_NTH  KIND:N[@DEVICE]: the Nth call of KIND (a cudasim_call_counts field name)
//                     on DEVICE (default 0) fails, as cudasim_fail_nth_call does (empty: none)
//   CUDASIM_CALL_REPORT  PATH: at exit, write every device's calls by kind since load (never
//                     reset) and whether a CUDASIM_FAIL_NTH failure happened, to PATH
//   CUDASIM_MALLOC_PAGE  bytes, as CUDASIM_CAPACITY, a multiple of 256: cudaMalloc's memory
//                     comes in pages of this size, as PyTorch's pull request 17120 describes the
//                     driver since Pascal (2 MiB): an allocation of more than half a page takes
//                     whole pages of its own, smaller ones share pages, including the rest of a
//                     large one's last page (malloc_pages.cpp; default off: every allocation takes
//                     its size rounded up to 256 B). What a GPU's driver does is what
//                     tests/gpu/vmm_checks.cpp measures.
// A bad value is fatal at load time: a simulator silently running with a default would make
// tests pass for the wrong reason.
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>

#include "state.h"

namespace cudasim {

namespace {

[[noreturn]] void bad_value(const char* name, const char* value, const char* expected) {
  std::fprintf(stderr, "cudasim: invalid %s='%s': expected %s\n", name, value, expected);
  _exit(2);
}

// Parses "<digits>[suffix]"; returns false on anything else or on overflow.
bool parse_bytes(std::string_view text, size_t* out) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits > 19) return false;
  unsigned long long number = 0;
  for (size_t i = 0; i < digits; ++i) number = number * 10 + static_cast<unsigned>(text[i] - '0');
  const std::string_view suffix = text.substr(digits);
  struct Unit {
    std::string_view name;
    unsigned long long factor;
  };
  static constexpr Unit kUnits[] = {
      {"", 1ULL},
      {"K", 1ULL << 10},
      {"M", 1ULL << 20},
      {"G", 1ULL << 30},
      {"T", 1ULL << 40},
      {"KiB", 1ULL << 10},
      {"MiB", 1ULL << 20},
      {"GiB", 1ULL << 30},
      {"TiB", 1ULL << 40},
      {"KB", 1000ULL},
      {"MB", 1000ULL * 1000},
      {"GB", 1000ULL * 1000 * 1000},
      {"TB", 1000ULL * 1000 * 1000 * 1000},
  };
  for (const Unit& unit : kUnits) {
    if (unit.name != suffix) continue;
    if (number > std::numeric_limits<size_t>::max() / unit.factor) return false;
    *out = static_cast<size_t>(number * unit.factor);
    return true;
  }
  return false;
}

}  // namespace

Config load_config() {
  Config config;
  if (const char* v = std::getenv("CUDASIM_DEVICES")) {
    char* end = nullptr;
    errno = 0;
    const long n = std::strtol(v, &end, 10);
    if (v[0] < '0' || v[0] > '9' || errno != 0 || *end != '\0' || n < 1 || n > 64) {
      bad_value("CUDASIM_DEVICES", v, "an integer from 1 to 64");
    }
    config.devices = static_cast<int>(n);
  }
  if (const char* v = std::getenv("CUDASIM_CAPACITY")) {
    size_t bytes = 0;
    if (!parse_bytes(v, &bytes) || bytes == 0) {
      bad_value("CUDASIM_CAPACITY", v,
                "a positive byte count such as 1073741824, 24GiB, 512MiB or 16GB");
    }
    config.capacity = bytes;
  }
  if (const char* v = std::getenv("CUDASIM_REPORT")) {
    if (std::strcmp(v, "1") == 0) {
      config.report = true;
    } else if (std::strcmp(v, "0") != 0 && v[0] != '\0') {
      bad_value("CUDASIM_REPORT", v, "0 or 1");
    }
  }
  if (const char* v = std::getenv("CUDASIM_VERBOSE")) {
    if (std::strcmp(v, "1") == 0) {
      config.verbose = true;
    } else if (std::strcmp(v, "0") != 0 && v[0] != '\0') {
      bad_value("CUDASIM_VERBOSE", v, "0 or 1");
    }
  }
  if (const char* v = std::getenv("CUDASIM_VMM")) {
    if (std::strcmp(v, "0") == 0) {
      config.vmm = false;
    } else if (std::strcmp(v, "1") != 0 && v[0] != '\0') {
      bad_value("CUDASIM_VMM", v, "0 or 1");
    }
  }
  if (const char* v = std::getenv("CUDASIM_FAIL_NTH"); v != nullptr && v[0] != '\0') {
    // KIND:N[@DEVICE], checked against the device count read above.
    const char* colon = std::strchr(v, ':');
    const std::string_view kind(v, colon == nullptr ? 0 : static_cast<size_t>(colon - v));
    const char* expected =
        "KIND:N[@DEVICE], KIND one of malloc, free, create, release, map, "
        "unmap, set_access, synchronize, reserve, address_free, event_create, "
        "event_record, event_query, mem_get_info, N from 1, DEVICE an existing device";
    const NamedCallKind* named = nullptr;
    for (const NamedCallKind& candidate : kCallKinds) {
      if (kind == candidate.name) named = &candidate;
    }
    if (named == nullptr) bad_value("CUDASIM_FAIL_NTH", v, expected);
    char* end = nullptr;
    errno = 0;
    const long n = std::strtol(colon + 1, &end, 10);
    if (colon[1] < '0' || colon[1] > '9' || errno != 0 || n < 1 || n > INT32_MAX) {
      bad_value("CUDASIM_FAIL_NTH", v, expected);
    }
    long device = 0;
    if (*end == '@') {
      const char* digits = end + 1;
      device = std::strtol(digits, &end, 10);
      if (digits[0] < '0' || digits[0] > '9' || errno != 0 || device >= config.devices) {
        bad_value("CUDASIM_FAIL_NTH", v, expected);
      }
    }
    if (*end != '\0') bad_value("CUDASIM_FAIL_NTH", v, expected);
    config.fail_kind = named->name;
    config.fail_n = static_cast<int>(n);
    config.fail_device = static_cast<int>(device);
  }
  if (const char* v = std::getenv("CUDASIM_MALLOC_PAGE"); v != nullptr && v[0] != '\0') {
    size_t bytes = 0;
    if (!parse_bytes(v, &bytes) || bytes == 0 || bytes % kAllocationAlignment != 0 ||
        bytes > (size_t{1} << 40)) {
      bad_value("CUDASIM_MALLOC_PAGE", v,
                "a positive multiple of 256 bytes up to 1TiB, such as 2MiB or 2097152");
    }
    config.malloc_page = bytes;
  }
  if (const char* v = std::getenv("CUDASIM_CALL_REPORT"); v != nullptr && v[0] != '\0') {
    config.call_report = strdup(v);  // the program may change its environment later
  }
  return config;
}

namespace {

// Reads the configuration at load time so that bad values stop the program before main().
__attribute__((constructor)) void load_at_startup() { (void)state(); }

}  // namespace

}  // namespace cudasim
