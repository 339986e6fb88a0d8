// Note [Before the sanitizer runtime]: a sanitizer runtime resolves its interceptors with
// dlsym(RTLD_NEXT) while it initializes, before anything instrumented may run. This file and
// dlsym_hook.cpp are therefore built without sanitizer instrumentation (CMakeLists.txt), and
// what they run on that path is plain C: no std::atomic or other template code that another,
// instrumented object could provide at -O0.
#include "dynamic_linker.h"

#include <dlfcn.h>
#include <link.h>

namespace cudacache::preload {
namespace {

using DlsymFunction = void* (*)(void*, const char*);

DlsymFunction g_real_dlsym = nullptr;  // accessed with __atomic builtins only

DlsymFunction find_real_dlsym() {
  // GLIBC_2.34 is the libc copy; 2.2.5 the one older programs (and libdl) bind to on x86-64.
  static const char* const kVersions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
  for (const char* version : kVersions) {
    if (void* found = dlvsym(RTLD_NEXT, "dlsym", version)) {
      return reinterpret_cast<DlsymFunction>(found);
    }
  }
  return nullptr;
}

const link_map* object_of(const void* address) {
  Dl_info info;
  link_map* map = nullptr;
  if (dladdr1(address, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) == 0) {
    return nullptr;
  }
  return map;
}

}  // namespace

void* real_dlsym_address() {
  DlsymFunction function = __atomic_load_n(&g_real_dlsym, __ATOMIC_ACQUIRE);
  if (function == nullptr) {
    function = find_real_dlsym();
    __atomic_store_n(&g_real_dlsym, function, __ATOMIC_RELEASE);
  }
  return reinterpret_cast<void*>(function);
}

void* real_dlsym(void* handle, const char* name) {
  auto function = reinterpret_cast<DlsymFunction>(real_dlsym_address());
  return function != nullptr ? function(handle, name) : nullptr;
}

bool is_own_address(const void* address) {
  static const link_map* const own = object_of(reinterpret_cast<const void*>(&is_own_address));
  return address != nullptr && object_of(address) == own;
}

}  // namespace cudacache::preload
