// Lock-ownership annotations, checked by clang's -Wthread-safety (the `clang` preset builds
// with -Werror=thread-safety); with g++ they document. They only mean something on a mutex
// type that carries them too: use cudacache::Mutex (mutex.h), not std::mutex.
#pragma once

#if defined(__clang__)
#define CUDACACHE_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define CUDACACHE_THREAD_ANNOTATION(x)
#endif

#define CUDACACHE_CAPABILITY(name) CUDACACHE_THREAD_ANNOTATION(capability(name))
#define CUDACACHE_SCOPED_CAPABILITY CUDACACHE_THREAD_ANNOTATION(scoped_lockable)
#define CUDACACHE_GUARDED_BY(lock) CUDACACHE_THREAD_ANNOTATION(guarded_by(lock))
#define CUDACACHE_PT_GUARDED_BY(lock) CUDACACHE_THREAD_ANNOTATION(pt_guarded_by(lock))
#define CUDACACHE_REQUIRES(...) CUDACACHE_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define CUDACACHE_EXCLUDES(...) CUDACACHE_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define CUDACACHE_ACQUIRE(...) CUDACACHE_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define CUDACACHE_RELEASE(...) CUDACACHE_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define CUDACACHE_TRY_ACQUIRE(...) CUDACACHE_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define CUDACACHE_NO_THREAD_SAFETY_ANALYSIS CUDACACHE_THREAD_ANNOTATION(no_thread_safety_analysis)
