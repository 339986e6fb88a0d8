# Warnings are errors for every target of this project (never for third-party headers,
# which come in through -isystem).
set(CUDACACHE_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion -Werror)
# clang checks the lock annotations (allocator/thread_annotations.h, allocator/mutex.h): a
# guarded member touched without its mutex, or a REQUIRES function called without it, fails
# the build. The `clang` preset is that build.
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  list(APPEND CUDACACHE_WARNINGS -Wthread-safety)
endif()

function(cudacache_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX,C>:${CUDACACHE_WARNINGS}>
    $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
endfunction()
