# By default tests run on the simulated runtime: LD_LIBRARY_PATH puts cudasim's
# libcudart.so.13 in front of NVIDIA's. tests/gpu/ configures with CUDACACHE_TESTS_ON_CUDASIM=OFF
# so that the same tests run on the real runtime (cudasim's own conformance tests are left out
# then, and tests that need cudasim's controls skip themselves).
include(GoogleTest)

option(CUDACACHE_TESTS_ON_CUDASIM "Run the tests on the simulated CUDA runtime" ON)

function(cudacache_sim_environment out)
  set(env "")
  if(CUDACACHE_TESTS_ON_CUDASIM)
    set(library_path "$<TARGET_FILE_DIR:cudasim>")
    if(DEFINED ENV{LD_LIBRARY_PATH} AND NOT "$ENV{LD_LIBRARY_PATH}" STREQUAL "")
      string(APPEND library_path ":$ENV{LD_LIBRARY_PATH}")
    endif()
    list(APPEND env "LD_LIBRARY_PATH=${library_path}" "CUDASIM_CAPACITY=8GiB")
  endif()
  if(CUDACACHE_SANITIZE MATCHES "address")
    list(APPEND env "ASAN_OPTIONS=detect_leaks=1:abort_on_error=1"
                    "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
  endif()
  if(CUDACACHE_SANITIZE MATCHES "thread")
    list(APPEND env "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1")
  endif()
  set(${out} "${env}" PARENT_SCOPE)
endfunction()

# cudacache_add_gtest(NAME SOURCES... [LIBS libs...] [ENV VAR=value...] [PROPERTIES prop value...])
# ENV entries come after the defaults (and so override them); PROPERTIES go to every test.
function(cudacache_add_gtest name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;ENV;PROPERTIES" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  # main() is tests/common/test_main.cpp's: gtest's, plus the fault sweep's checks.
  target_link_libraries(${name} PRIVATE GTest::gtest CUDA::cudart cudasim_controls
                        cudacache_test_main ${ARG_LIBS})
  cudacache_warnings(${name})
  add_dependencies(${name} cudasim)
  cudacache_sim_environment(env)
  list(APPEND env ${ARG_ENV})
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST TEST_LIST ${name}_TESTS
                       PROPERTIES TIMEOUT 120 ${ARG_PROPERTIES})
  # gtest_discover_tests cannot pass a list-valued property (ENVIRONMENT "A;B" comes out as
  # ENVIRONMENT A plus a bogus property B), so a script run after discovery sets it.
  set(env_script "${CMAKE_CURRENT_BINARY_DIR}/${name}_environment.cmake")
  file(GENERATE OUTPUT "${env_script}" CONTENT
       "if(${name}_TESTS)\n  set_tests_properties(\${${name}_TESTS} PROPERTIES ENVIRONMENT [==[${env}]==])\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${env_script}")
endfunction()
