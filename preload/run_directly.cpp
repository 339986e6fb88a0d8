// Running the library itself (./libcudacache_preload.so) prints its version and how to use it,
// as glibc's libc.so.6 does, instead of crashing: the library has an ELF interpreter and an
// entry point (preload/CMakeLists.txt: -Wl,-e,cudacache_preload_entry). The dynamic loader
// has initialised the C library when the entry runs; it returns by _exit, never by return
// (there is no caller).
#include <cudacache/cudacache.h>

#include <unistd.h>

#include <cstring>

#if defined(__x86_64__)
extern "C" const char cudacache_preload_interp[] __attribute__((section(".interp"), used)) =
    "/lib64/ld-linux-x86-64.so.2";
#elif defined(__aarch64__)
extern "C" const char cudacache_preload_interp[] __attribute__((section(".interp"), used)) =
    "/lib/ld-linux-aarch64.so.1";
#endif

namespace {

constexpr const char kUsage[] =
    "libcudacache_preload.so " CUDACACHE_VERSION_STRING
    ": cudacache's caching allocator for unmodified CUDA programs.\n"
    "\n"
    "usage: LD_PRELOAD=/path/to/libcudacache_preload.so PROGRAM [ARGS...]\n"
    "\n"
    "  CUDACACHE_CONF=key:value,...   allocator options (CUDACACHE_CONF=help lists them)\n"
    "  CUDACACHE_STATS_AT_EXIT=1|FILE a summary at exit, on stderr or in FILE\n"
    "  CUDACACHE_SNAPSHOT_AT_EXIT=1|FILE the memory snapshot (JSON) at exit, with frames\n"
    "                                 under CUDACACHE_CONF=record_history:N,record_stacks:cpp\n"
    "  CUDACACHE_LOG_LEVEL=debug      what the preload does (trace, debug, info, warn, ...)\n"
    "  CUDACACHE_PRELOAD_DRIVER=0     no driver-level hooks (static-runtime programs need them)\n"
    "\n"
    "On the simulated GPU: LD_PRELOAD=/path/to/libcudacache_preload.so cudasim-run PROGRAM\n"
    "(cudasim-run puts its runtime after the preload). See preload/README.md.\n";

}  // namespace

extern "C" __attribute__((force_align_arg_pointer, noreturn, used)) void cudacache_preload_entry() {
  const ssize_t written = write(STDOUT_FILENO, kUsage, std::strlen(kUsage));
  _exit(written < 0 ? 1 : 0);
}
