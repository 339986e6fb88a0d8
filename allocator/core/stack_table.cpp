#include "stack_table.h"

#include "json_writer.h"
#include "log.h"
#include "mutex.h"
#include "thread_annotations.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <sys/auxv.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <unordered_map>
#include <utility>

namespace cudacache {
namespace {

// Deep enough for a framework's call chain down to the allocator; deeper frames are cut.
constexpr int kMaxCppFrames = 48;

// A stack's key: the number of C++ return addresses, the addresses, then the ids of the
// interned Python frames.
using StackKey = std::vector<std::uint64_t>;

struct StackKeyHash {
  std::size_t operator()(const StackKey& key) const noexcept {
    std::uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a over the words
    for (const std::uint64_t word : key) hash = (hash ^ word) * 0x100000001b3ULL;
    return static_cast<std::size_t>(hash);
  }
};

class StackTable {
 public:
  StackId intern(StackKey&& key) CUDACACHE_EXCLUDES(mutex_) {
    MutexLock lock(mutex_);
    if (const auto it = ids_.find(key); it != ids_.end()) return it->second;
    if (stacks_.size() >= kMaxStacks) {
      if (!full_logged_) {
        full_logged_ = true;
        logger().warn("allocation stacks: {} distinct stacks recorded; new ones are dropped",
                      kMaxStacks);
      }
      return 0;
    }
    stacks_.push_back(key);
    const auto id = static_cast<StackId>(stacks_.size());  // ids start at 1
    ids_.emplace(std::move(key), id);
    return id;
  }

  std::uint64_t intern_python_frame(const char* name, const char* filename, int line)
      CUDACACHE_EXCLUDES(mutex_) {
    std::string text = std::string(name != nullptr ? name : "??") + '\0' +
                       (filename != nullptr ? filename : "??") + '\0' + std::to_string(line);
    MutexLock lock(mutex_);
    const auto [it, inserted] = python_ids_.emplace(std::move(text), python_frames_.size());
    if (inserted) {
      python_frames_.push_back(
          Frame{name != nullptr ? name : "??", filename != nullptr ? filename : "??", line});
    }
    return it->second;
  }

  // With `site_key`, also the key of the allocation site (stack_site_key).
  std::vector<Frame> frames(StackId id, std::string* site_key = nullptr)
      CUDACACHE_EXCLUDES(mutex_) {
    StackKey key;
    std::vector<std::uint64_t> unnamed;
    {
      MutexLock lock(mutex_);
      if (id == 0 || id > stacks_.size()) return {};
      key = stacks_[id - 1];
      const std::size_t cpp_count = static_cast<std::size_t>(key[0]);
      for (std::size_t i = 1; i <= cpp_count; ++i) {
        if (symbols_.count(key[i]) == 0) unnamed.push_back(key[i]);
      }
    }
    // Named without our lock: dladdr takes the dynamic linker's, which a thread loading a
    // library may hold while it allocates (and so waits for ours in intern()).
    std::vector<std::pair<std::uint64_t, Symbol>> named;
    named.reserve(unnamed.size());
    for (const std::uint64_t address : unnamed) named.emplace_back(address, resolve(address));
    MutexLock lock(mutex_);
    for (auto& [address, symbol] : named) symbols_.try_emplace(address, std::move(symbol));
    const std::size_t cpp_count = static_cast<std::size_t>(key[0]);
    // The leading frames inside cudacache (its API, the allocator, the shim's entry points)
    // say nothing about the program; they go, unless nothing else would be left.
    std::size_t first = 1;
    while (first <= cpp_count && symbols_.at(key[first]).inside_cudacache) ++first;
    if (first > cpp_count && key.size() == cpp_count + 1) first = 1;
    std::vector<Frame> result;
    for (std::size_t i = first; i <= cpp_count; ++i) {
      const Symbol& symbol = symbols_.at(key[i]);
      result.push_back(symbol.frame);
      if (site_key != nullptr) {
        // A named function is one site whatever the return address inside it; an unnamed
        // one is known only by its address.
        *site_key += symbol.named ? symbol.frame.name : std::to_string(key[i]);
        *site_key += '\n';
      }
    }
    for (std::size_t i = cpp_count + 1; i < key.size(); ++i) {
      const Frame& frame = python_frames_[static_cast<std::size_t>(key[i])];
      result.push_back(frame);
      if (site_key != nullptr) {
        *site_key += frame.filename;
        *site_key += ':';
        *site_key += std::to_string(frame.line);
        *site_key += '\n';
      }
    }
    return result;
  }

 private:
  struct Symbol {
    Frame frame;
    bool named = false;  // from the symbol table (not an offset)
    bool inside_cudacache = false;
  };

  static Symbol resolve(std::uint64_t address) {
    // The object cudacache is compiled into, when that is a library of its own
    // (libcudacache.so, the preload) rather than the program (tools and tests that link the
    // core archive): every function of such a library is cudacache's.
    static const void* const own_library = []() -> const void* {
      Dl_info own{};
      Dl_info program{};
      const auto* program_headers = reinterpret_cast<const void*>(getauxval(AT_PHDR));
      if (dladdr(reinterpret_cast<void*>(&capture_stack), &own) == 0) return nullptr;
      if (program_headers != nullptr && dladdr(program_headers, &program) != 0 &&
          program.dli_fbase == own.dli_fbase) {
        return nullptr;
      }
      return own.dli_fbase;
    }();
    Symbol symbol;
    Dl_info info{};
    // A return address follows its call: the byte before it is inside the calling function.
    if (dladdr(reinterpret_cast<void*>(address - 1), &info) == 0) {
      symbol.frame.name = "??";
      symbol.frame.filename = "??";
      return symbol;
    }
    symbol.frame.filename = info.dli_fname != nullptr ? info.dli_fname : "??";
    if (info.dli_sname != nullptr) {
      int status = 0;
      const std::unique_ptr<char, void (*)(void*)> demangled(
          abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status), std::free);
      symbol.frame.name = status == 0 && demangled ? demangled.get() : info.dli_sname;
      symbol.named = true;
    } else {
      // Not in the dynamic symbol table (a program's own functions need -rdynamic): the
      // offset into its object, which addr2line resolves.
      const auto offset = address - reinterpret_cast<std::uint64_t>(info.dli_fbase);
      std::array<char, 32> text{};
      std::snprintf(text.data(), text.size(), "??+0x%llx", static_cast<unsigned long long>(offset));
      symbol.frame.name = text.data();
    }
    const std::string_view name = symbol.frame.name;
    symbol.inside_cudacache = (own_library != nullptr && info.dli_fbase == own_library) ||
                              name.rfind("cudacache_", 0) == 0;
    return symbol;
  }

  Mutex mutex_;
  std::vector<StackKey> stacks_ CUDACACHE_GUARDED_BY(mutex_);
  std::unordered_map<StackKey, StackId, StackKeyHash> ids_ CUDACACHE_GUARDED_BY(mutex_);
  std::unordered_map<std::string, std::uint64_t> python_ids_ CUDACACHE_GUARDED_BY(mutex_);
  std::vector<Frame> python_frames_ CUDACACHE_GUARDED_BY(mutex_);
  std::unordered_map<std::uint64_t, Symbol> symbols_ CUDACACHE_GUARDED_BY(mutex_);
  bool full_logged_ CUDACACHE_GUARDED_BY(mutex_) = false;
};

StackTable& table() {
  static auto* const instance = new StackTable();  // never destroyed: used from exit paths
  return *instance;
}

std::atomic<PythonFramesProvider> python_provider{nullptr};

struct PythonSink {
  StackKey* key;
  bool failed = false;  // host memory ran out on a frame: thrown once the provider is back
};

// Called by the provider with the interpreter's lock held: an exception through it would leave
// the lock taken (found in review), so a failure is kept for after the provider returns.
void emit_python_frame(void* sink, const char* name, const char* filename, int line) noexcept {
  auto* target = static_cast<PythonSink*>(sink);
  if (target->failed) return;
  try {
    target->key->push_back(table().intern_python_frame(name, filename, line));
  } catch (...) {
    target->failed = true;
  }
}

}  // namespace

const char* stack_kind_name(StackKind kind) {
  switch (kind) {
    case StackKind::kNone: return "none";
    case StackKind::kCpp: return "cpp";
    case StackKind::kPython: return "python";
    case StackKind::kAll: return "all";
  }
  return "none";
}

bool parse_stack_kind(std::string_view text, StackKind* kind) {
  for (const StackKind candidate :
       {StackKind::kNone, StackKind::kCpp, StackKind::kPython, StackKind::kAll}) {
    if (text == stack_kind_name(candidate)) {
      *kind = candidate;
      return true;
    }
  }
  return false;
}

__attribute__((noinline)) StackId capture_stack(StackKind kind, const void* outermost_inside) {
  if (kind == StackKind::kNone) return 0;
  StackKey key{0};
  if (wants_cpp(kind)) {
    std::array<void*, kMaxCppFrames> addresses{};
    const int count = backtrace(addresses.data(), kMaxCppFrames);
    // Frame 0 is this function; the caller's frames start at its entry point's return address.
    int first = 1;
    for (int i = 1; i < count && outermost_inside != nullptr; ++i) {
      if (addresses[i] == outermost_inside) {
        first = i;
        break;
      }
    }
    for (int i = first; i < count; ++i) {
      key.push_back(reinterpret_cast<std::uint64_t>(addresses[i]));
    }
    key[0] = key.size() - 1;
  }
  if (wants_python(kind)) {
    if (const PythonFramesProvider provider = python_provider.load(std::memory_order_acquire)) {
      PythonSink sink{&key};
      provider(&emit_python_frame, &sink);
      if (sink.failed) throw std::bad_alloc();
    }
  }
  if (key.size() == 1) return 0;
  return table().intern(std::move(key));
}

std::vector<Frame> stack_frames(StackId id) { return table().frames(id); }

std::string stack_site_key(StackId id) {
  std::string key;
  table().frames(id, &key);
  return key;
}

void write_frames(JsonWriter& json, StackId id) {
  json.begin_array();
  if (id != 0) {
    for (const Frame& frame : stack_frames(id)) {
      json.begin_object();
      json.field("name", frame.name);
      json.field("filename", frame.filename);
      json.field("line", static_cast<std::int64_t>(frame.line));
      json.end_object();
    }
  }
  json.end_array();
}

void set_python_frames_provider(PythonFramesProvider provider) {
  python_provider.store(provider, std::memory_order_release);
}

bool python_frames_available() {
  return python_provider.load(std::memory_order_acquire) != nullptr;
}

}  // namespace cudacache
