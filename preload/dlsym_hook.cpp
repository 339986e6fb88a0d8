// The exported dlsym. Looking a runtime or driver allocation function up by name returns
// cudacache's hook (the real function is remembered): this is how the CUDA runtime gets the
// driver (dlopen libcuda.so.1, dlsym cuGetProcAddress_v2), and how Python's ctypes calls a
// runtime it loaded RTLD_LOCAL. Every other lookup is glibc's answer, unchanged.
//
// dlsym(RTLD_NEXT, name) and dlsym(RTLD_DEFAULT, name) depend on who calls: glibc searches
// after the caller's object, or in the caller's scope, which it finds from the return address.
// Forwarding such a call from C++ would make us the caller, so on x86-64 `dlsym` is a few
// instructions of assembly that jump (not call) to glibc's dlsym for these two handles, leaving
// the caller's return address in place; other handles go to the C++ hook. (RTLD_DEFAULT needs
// no substitution: it finds our exports first anyway.) Elsewhere such lookups are answered as
// if made by this library: right for callers loaded before it (the program, a sanitizer
// runtime), approximate for the rest. This path also runs while a sanitizer runtime
// initializes (Note [Before the sanitizer runtime] in dynamic_linker.cpp).
//
// dlvsym is not interposed: a program that asks for a versioned symbol gets the real
// function (the passthrough test uses it to allocate behind cudacache's back).
#include <dlfcn.h>

#include <cstring>

#include "driver_hooks.h"
#include "dynamic_linker.h"
#include "real_runtime.h"
#include "runtime_hooks.h"

namespace cudacache::preload {
namespace {

void* substitute(const char* name, void* found) {
  if (name[0] != 'c' || name[1] != 'u') return found;  // the common case, cheaply
  if (is_own_address(found)) return found;
  if (std::strncmp(name, "cuda", 4) == 0) {
    void* hook = runtime_hook(name);
    if (hook == nullptr) return found;
    real::seed_runtime_function(name, found);
    return hook;
  }
  return substitute_driver_export(name, found);
}

}  // namespace
}  // namespace cudacache::preload

extern "C" {

__attribute__((visibility("hidden"))) void* cudacache_preload_dlsym_hook(void* handle,
                                                                         const char* name);
__attribute__((visibility("hidden"))) void* cudacache_preload_real_dlsym_address();

void* cudacache_preload_dlsym_hook(void* handle, const char* name) {
  namespace preload = cudacache::preload;
  void* found = preload::real_dlsym(handle, name);
  if (found == nullptr) return found;
  return preload::substitute(name, found);
}

void* cudacache_preload_real_dlsym_address() { return cudacache::preload::real_dlsym_address(); }

}  // extern "C"

#if defined(__x86_64__)
// dlsym(handle, name): RTLD_NEXT ((void*)-1) and RTLD_DEFAULT (NULL) tail-jump to glibc's
// dlsym, found first if need be (argument registers saved, stack 16-byte aligned for the call).
// endbr64 (a no-op without CET) because the program reaches dlsym through an indirect jump.
asm(R"(
  .pushsection .text
  .globl dlsym
  .type dlsym, @function
  .p2align 4
dlsym:
  .cfi_startproc
  endbr64
  cmpq $-1, %rdi
  je 2f
  testq %rdi, %rdi
  jne cudacache_preload_dlsym_hook
2:
  pushq %rdi
  .cfi_adjust_cfa_offset 8
  pushq %rsi
  .cfi_adjust_cfa_offset 8
  subq $8, %rsp
  .cfi_adjust_cfa_offset 8
  call cudacache_preload_real_dlsym_address
  addq $8, %rsp
  .cfi_adjust_cfa_offset -8
  popq %rsi
  .cfi_adjust_cfa_offset -8
  popq %rdi
  .cfi_adjust_cfa_offset -8
  testq %rax, %rax
  jz 1f
  jmp *%rax
1:
  ret
  .cfi_endproc
  .size dlsym, .-dlsym
  .popsection
)");
#else
// noexcept: glibc declares it __THROW.
extern "C" __attribute__((visibility("default"))) void* dlsym(void* handle,
                                                              const char* name) noexcept {
  if (handle == RTLD_NEXT || handle == RTLD_DEFAULT) {
    return cudacache::preload::real_dlsym(handle, name);
  }
  return cudacache_preload_dlsym_hook(handle, name);
}
#endif
