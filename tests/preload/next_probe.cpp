// A library that asks dlsym(RTLD_NEXT) for a symbol it defines itself: the answer must be the
// next definition after *this* library (none), not after the preload, which comes before it.
#include <dlfcn.h>

extern "C" {

__attribute__((visibility("default"))) const char* preload_probe_name() { return "probe"; }

__attribute__((visibility("default"))) void* preload_probe_next() {
  return dlsym(RTLD_NEXT, "preload_probe_name");
}

}  // extern "C"
