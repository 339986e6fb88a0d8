// Fuzzer: the CUDACACHE_CONF string. Any input either parses or is rejected with
// cudacache::Error (CUDACACHE_CONFIG); what parses prints a configuration string that parses to
// the same options.
#include "options.h"

#include <cudacache/cudacache.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  cudacache::Options options;
  try {
    options = cudacache::Options(text);
  } catch (const cudacache::Error& error) {
    if (error.status() != CUDACACHE_CONFIG) {
      std::fprintf(stderr, "fuzz_options: error status %d, not CONFIG: %s\n",
                   static_cast<int>(error.status()), error.what());
      std::abort();
    }
    return 0;
  }
  const std::string printed = options.to_config_string();
  const std::string again = cudacache::Options(printed).to_config_string();
  if (again != printed) {
    std::fprintf(stderr, "fuzz_options: \"%s\" prints \"%s\", which prints \"%s\"\n", text.c_str(),
                 printed.c_str(), again.c_str());
    std::abort();
  }
  return 0;
}
