# Tests always run on the simulated runtime here: LD_LIBRARY_PATH puts cudasim's
# libcudart.so.13 in front of NVIDIA's. On a GPU machine, tests/gpu/ runs them without it.
include(GoogleTest)

function(cudacache_sim_environment out)
  set(env "LD_LIBRARY_PATH=$<TARGET_FILE_DIR:cudasim>:$ENV{LD_LIBRARY_PATH}"
          "CUDASIM_CAPACITY=8GiB")
  if(CUDACACHE_SANITIZE MATCHES "address")
    list(APPEND env "ASAN_OPTIONS=detect_leaks=1:abort_on_error=1"
                    "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
  endif()
  if(CUDACACHE_SANITIZE MATCHES "thread")
    list(APPEND env "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1")
  endif()
  set(${out} "${env}" PARENT_SCOPE)
endfunction()

# cudacache_add_gtest(NAME SOURCES... [LIBS libs...])
function(cudacache_add_gtest name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE GTest::gtest GTest::gtest_main CUDA::cudart cudasim_controls ${ARG_LIBS})
  cudacache_warnings(${name})
  add_dependencies(${name} cudasim)
  cudacache_sim_environment(env)
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST PROPERTIES ENVIRONMENT "${env}" TIMEOUT 120)
endfunction()
