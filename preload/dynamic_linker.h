// The dynamic linker as the preload needs it: the real dlsym (the exported `dlsym` is our
// hook) and "is this address ours".
#pragma once

namespace cudacache::preload {

// glibc's dlsym, found with dlvsym (which is not interposed). Never null after the first call
// on a glibc system.
void* real_dlsym(void* handle, const char* name);
// glibc's dlsym itself, for a jump that keeps the caller's return address (dlsym_hook.cpp).
void* real_dlsym_address();

// True when `address` lies in libcudacache_preload.so itself.
bool is_own_address(const void* address);

}  // namespace cudacache::preload
