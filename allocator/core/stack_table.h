// Allocation stacks: where in a program each block was allocated, for the history's frames
// (PyTorch's `frames`: {name, filename, line}, innermost first) and the growth detector's
// allocation sites.
//
// Capture is cheap and symbolization lazy. C++ frames are return addresses (backtrace(3)),
// interned once per distinct stack; they are named (dladdr(3) and the C++ demangler) only when
// a snapshot or a report is exported, once per address. Python frames come from a provider
// that the PyTorch shim registers (cudacache_set_python_frames_provider); they are interned as
// text when captured, since a code object may be gone by export time.
//
// One process-wide table with its own mutex: capture runs before an allocator takes its lock,
// so a provider that waits for Python's GIL never waits while holding an allocator's lock.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cudacache {

class JsonWriter;

// Which frames a capture takes (PyTorch's _record_memory_history(stacks=...)).
enum class StackKind : std::uint8_t { kNone = 0, kCpp = 1, kPython = 2, kAll = 3 };

inline bool wants_cpp(StackKind kind) { return (static_cast<int>(kind) & 1) != 0; }
inline bool wants_python(StackKind kind) { return (static_cast<int>(kind) & 2) != 0; }

// "none", "cpp", "python", "all".
const char* stack_kind_name(StackKind kind);
// Parses one of those names; false for anything else.
bool parse_stack_kind(std::string_view text, StackKind* kind);

using StackId = std::uint32_t;  // 0: no stack
// At most this many distinct stacks are kept; later new ones are recorded as 0 (logged once).
inline constexpr std::size_t kMaxStacks = std::size_t{1} << 20;

struct Frame {
  std::string name;
  std::string filename;
  int line = 0;
};

// Captures the stack from `outermost_inside`, the return address of cudacache's entry point
// (DeviceAllocator::allocate passes __builtin_return_address(0)), on: cudacache's own frames
// below it are not kept. nullptr keeps every frame but this function's. 0 for kNone, when
// nothing could be captured, or when the table is full. Python frames need a provider
// (python_frames_available()).
StackId capture_stack(StackKind kind, const void* outermost_inside = nullptr);

// The frames of a captured stack, innermost first, Python frames after C++ ones. Leading
// frames of cudacache's entry points are left out too: its C API and the PyTorch shim
// (`cudacache_*` functions) and, when cudacache is a library of its own (libcudacache.so, the
// preload), every function of that library. Empty for 0 or an unknown id.
std::vector<Frame> stack_frames(StackId id);

// What tells allocation sites apart: the names of the C++ functions (not the return addresses
// inside them, so that a loop the compiler unrolled is one site), the addresses of unnamed
// ones, the file and line of Python frames. "" for 0 or an unknown id.
std::string stack_site_key(StackId id);

// Writes stack_frames(id) as PyTorch's "frames" value: [{"name", "filename", "line"}, ...].
void write_frames(JsonWriter& json, StackId id);

// Python frames: the provider calls `emit` once per frame, innermost first, with strings that
// need to live only during the call. Registered by libcudacache_torch; nullptr unregisters.
using FrameSink = void (*)(void* sink, const char* name, const char* filename, int line);
using PythonFramesProvider = void (*)(FrameSink emit, void* sink);
void set_python_frames_provider(PythonFramesProvider provider);
bool python_frames_available();

}  // namespace cudacache
