// The reentrancy guard: "this thread is inside cudacache".
//
// Note [Reentrancy]: cudacache's own CUDA calls never reach the exported hooks at the runtime
// level: the allocator core is linked with `--wrap` for every runtime function it calls
// (runtime_functions.inc), so its cudaMalloc is __wrap_cudaMalloc, which calls the real runtime
// directly. One path remains: the real runtime implements cudaMalloc with the driver's
// cuMemAlloc_v2, which it fetched through cuGetProcAddress, that is, from us. Every hook sets
// this flag for as long as it runs; a driver hook that finds it set forwards to the real driver
// function untouched. It is a plain thread-local bool (initial-exec: the library is loaded at
// start-up), so the check costs one TLS load.
#pragma once

namespace cudacache::preload {

bool inside_cudacache();

class InsideCudacache {
 public:
  InsideCudacache();
  ~InsideCudacache();
  InsideCudacache(const InsideCudacache&) = delete;
  InsideCudacache& operator=(const InsideCudacache&) = delete;

 private:
  bool previous_;
};

}  // namespace cudacache::preload
