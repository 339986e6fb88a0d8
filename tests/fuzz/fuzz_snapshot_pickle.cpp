// Fuzzer: PyTorch snapshot pickles (what `cudacache-replay` imports). Any input is parsed by the
// restricted pickle reader and converted into a trace, or rejected with TraceError (PickleError
// is one); nothing else may escape, and no input may crash, hang or run out of memory.
#include "pickle_reader.h"
#include "snapshot_converter.h"
#include "trace.h"

#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const cudacache::replay::PickleRef snapshot =
        cudacache::replay::parse_pickle(bytes, "fuzz.pickle");
    cudacache::replay::convert_snapshot(*snapshot, 0, "fuzz.pickle");
  } catch (const cudacache::replay::TraceError&) {
  }
  return 0;
}
