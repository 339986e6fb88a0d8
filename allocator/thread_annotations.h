// Lock-ownership annotations. Checked by clang's -Wthread-safety; with g++ they document.
#pragma once

#if defined(__clang__)
#define CUDACACHE_GUARDED_BY(lock) __attribute__((guarded_by(lock)))
#define CUDACACHE_REQUIRES(lock) __attribute__((requires_capability(lock)))
#define CUDACACHE_EXCLUDES(lock) __attribute__((locks_excluded(lock)))
#else
#define CUDACACHE_GUARDED_BY(lock)
#define CUDACACHE_REQUIRES(lock)
#define CUDACACHE_EXCLUDES(lock)
#endif
