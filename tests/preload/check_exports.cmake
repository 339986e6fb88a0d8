# The preload library must not depend on a CUDA runtime or driver (it uses the one the process
# loaded) and must not import any cuda* / cu* symbol (the allocator core's runtime calls are
# wrapped; see preload/runtime_functions.inc), nor on spdlog or fmt. It exports exactly the
# interposed functions.
# cmake -DLIBRARY=libcudacache_preload.so -P check_exports.cmake
cmake_minimum_required(VERSION 3.25)
execute_process(COMMAND readelf --dynamic "${LIBRARY}" OUTPUT_VARIABLE dynamic COMMAND_ERROR_IS_FATAL ANY)
if(dynamic MATCHES "NEEDED[^\n]*(libcudart|libcuda\\.)")
  message(FATAL_ERROR "the preload library needs a CUDA library:\n${dynamic}")
endif()
# spdlog and fmt are compiled in, header-only and hidden: a preload must not bring libraries of
# its own into every program it is loaded into.
if(dynamic MATCHES "NEEDED[^\n]*(libspdlog|libfmt)")
  message(FATAL_ERROR "the preload library brings spdlog or fmt into the program:\n${dynamic}")
endif()
execute_process(COMMAND nm -D --undefined-only "${LIBRARY}" OUTPUT_VARIABLE undefined COMMAND_ERROR_IS_FATAL ANY)
string(REGEX MATCHALL "[ \t]U (cu[A-Za-z0-9_]*)" cuda_imports "${undefined}")
if(cuda_imports)
  message(FATAL_ERROR "the preload library imports CUDA symbols (add them to runtime_functions.inc): ${cuda_imports}")
endif()
execute_process(COMMAND nm -D --defined-only "${LIBRARY}" OUTPUT_VARIABLE defined COMMAND_ERROR_IS_FATAL ANY)
string(REGEX MATCHALL " [TW] ([A-Za-z0-9_]+)" exports "${defined}")
list(LENGTH exports count)
if(NOT count EQUAL 17)
  message(FATAL_ERROR "expected the 17 interposed functions as the only exports, found ${count}:\n${defined}")
endif()
message(STATUS "no CUDA dependency; ${count} exports")
