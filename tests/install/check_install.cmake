# The install, as a user meets it: cmake --install of this build into a fresh prefix, then a
# separate project (consumer/) configured with find_package(cudacache) against it, built, and
# run on the installed cudasim; the C program built again with pkg-config alone; or
# (-DMODE=subdirectory) the consumer built with add_subdirectory of the source tree.
#
# cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... [-DMODE=subdirectory] -P check_install.cmake
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(output "${out}" PARENT_SCOPE)
endfunction()
function(expect text)
  string(FIND "${output}" "${text}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "expected '${text}' in:\n${output}")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(consumer ${SOURCE_DIR}/tests/install/consumer)
set(consumer_build ${WORK_DIR}/consumer-build)

if(MODE STREQUAL "subdirectory")
  # No build type, CMake's default: this compiles the library and cudasim once more, and
  # without optimization in about 2/3 of Release's time (85 against 124 s on 2 cores).
  run(${CMAKE_COMMAND} -S ${consumer} -B ${consumer_build} -G Ninja
      -DCUDACACHE_SOURCE_DIR=${SOURCE_DIR})
  run(${CMAKE_COMMAND} --build ${consumer_build} --target consumer consumer_c)
  set(ENV{LD_LIBRARY_PATH} "${BUILD_DIR}/tools/cudasim")
  run(${consumer_build}/consumer)
  expect("consumer: cudacache")
  return()
endif()

set(prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
run(${CMAKE_COMMAND} -S ${consumer} -B ${consumer_build} -G Ninja
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix})
expect("consumer: cudacache")
run(${CMAKE_COMMAND} --build ${consumer_build})
# The installed package says where cudasim is; the programs run there with nothing else.
set(ENV{LD_LIBRARY_PATH} "${prefix}/lib/cudacache/cudasim")
run(${consumer_build}/consumer)
expect("ok")
run(${consumer_build}/consumer_c)
expect("consumer_c: cudacache")
# cudasim-run, installed in bin/, finds the installed cudasim too.
unset(ENV{LD_LIBRARY_PATH})
run(${prefix}/bin/cudasim-run ${consumer_build}/consumer)
expect("ok")

# pkg-config alone (no CMake): compile and run the C program.
find_program(PKG_CONFIG pkg-config REQUIRED)
set(ENV{PKG_CONFIG_PATH} "${prefix}/lib/pkgconfig")
run(${PKG_CONFIG} --modversion cudacache)
string(STRIP "${output}" version)
run(${PKG_CONFIG} --cflags --libs cudacache)
separate_arguments(flags UNIX_COMMAND "${output}")
run(cc -std=c99 -o ${WORK_DIR}/consumer_pc ${consumer}/consumer.c ${flags}
    -Wl,-rpath,${prefix}/lib)
set(ENV{LD_LIBRARY_PATH} "${prefix}/lib/cudacache/cudasim")
run(${WORK_DIR}/consumer_pc)
expect("consumer_c: cudacache ${version} ok")
