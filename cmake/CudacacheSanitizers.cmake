# CUDACACHE_SANITIZE: "" (none), "address,undefined" or "thread". Applied to every target.
set(CUDACACHE_SANITIZE "" CACHE STRING "Sanitizers to build with")
if(CUDACACHE_SANITIZE)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX,C>:-fsanitize=${CUDACACHE_SANITIZE}>
                      $<$<COMPILE_LANGUAGE:CXX,C>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX,C>:-fno-sanitize-recover=all>)
  add_link_options(-fsanitize=${CUDACACHE_SANITIZE})
endif()

# The fuzzers' build (CUDACACHE_FUZZERS, tests/fuzz): every target carries libFuzzer's coverage
# instrumentation; the fuzzer executables link libFuzzer itself.
if(CUDACACHE_FUZZERS)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "CUDACACHE_FUZZERS needs clang (libFuzzer): use the `clang` preset")
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:CXX,C>:-fsanitize=fuzzer-no-link>)
endif()
