# Runs a program twice, without and with the preload, and checks what the preload promises:
# identical standard output, and device allocations (cudasim's CUDASIM_REPORT line) falling.
#
# cmake -DCOMMAND=prog^^arg... -DPRELOAD=lib.so [-DBASE_PRELOAD=lib.so] [-DENV=A=1^^B=2]
#       [-DWITH_ENV=...] [-DMAX_MALLOCS_WITH=N] [-DMIN_MALLOCS_WITHOUT=N]
#       [-DMAX_SYNCHRONIZE_WITH=N]
#       [-DEXPECT_STDOUT=regex] [-DEXPECT_WITH_STDERR=regex] [-DCOMPARE=OFF]
#       [-DCHECK_FILE=path -DCHECK_FILE_REGEX=regex] -P run_compare.cmake
# Lists use ^^ as separator (a ; does not survive add_test). BASE_PRELOAD goes first in
# LD_PRELOAD in both runs (a sanitizer runtime for programs that are not instrumented).
cmake_minimum_required(VERSION 3.25)

foreach(list_var COMMAND ENV WITH_ENV)
  string(REPLACE "^^" ";" ${list_var} "${${list_var}}")
endforeach()
if(NOT DEFINED COMPARE)
  set(COMPARE ON)
endif()

function(run_program label preload out_var err_var)
  set(env CUDASIM_REPORT=1 ${ENV} ${ARGN})
  if(NOT "${preload}" STREQUAL "")
    list(APPEND env "LD_PRELOAD=${preload}")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -E env ${env} ${COMMAND}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "run ${label} failed (${rc})\nstdout:\n${out}\nstderr:\n${err}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
  set(${err_var} "${err}" PARENT_SCOPE)
endfunction()

function(device_mallocs label err out_var)
  if(NOT err MATCHES "cudasim: mallocs=([0-9]+) frees=([0-9]+)")
    message(FATAL_ERROR "run ${label}: no CUDASIM_REPORT line in stderr:\n${err}")
  endif()
  set(${out_var} ${CMAKE_MATCH_1} PARENT_SCOPE)
endfunction()

set(with_preload "${PRELOAD}")
if(BASE_PRELOAD)
  set(with_preload "${BASE_PRELOAD}:${PRELOAD}")
endif()

if(CHECK_FILE)
  file(REMOVE "${CHECK_FILE}")
endif()
run_program(without "${BASE_PRELOAD}" out_without err_without)
run_program(with "${with_preload}" out_with err_with ${WITH_ENV})
device_mallocs(without "${err_without}" mallocs_without)
device_mallocs(with "${err_with}" mallocs_with)
message(STATUS "without the preload: ${mallocs_without} device allocations, stdout:\n${out_without}")
message(STATUS "with the preload: ${mallocs_with} device allocations, stdout:\n${out_with}")

if(COMPARE AND NOT out_without STREQUAL out_with)
  message(FATAL_ERROR "standard output differs with the preload\nwithout:\n${out_without}\nwith:\n${out_with}")
endif()
if(DEFINED MIN_MALLOCS_WITHOUT AND mallocs_without LESS MIN_MALLOCS_WITHOUT)
  message(FATAL_ERROR "expected at least ${MIN_MALLOCS_WITHOUT} device allocations without the preload, got ${mallocs_without}")
endif()
if(DEFINED MAX_MALLOCS_WITH AND mallocs_with GREATER MAX_MALLOCS_WITH)
  message(FATAL_ERROR "expected at most ${MAX_MALLOCS_WITH} device allocations with the preload, got ${mallocs_with}\n${err_with}")
endif()
if(DEFINED MAX_SYNCHRONIZE_WITH)
  if(NOT err_with MATCHES "synchronize=([0-9]+)")
    message(FATAL_ERROR "run with: no synchronize count in the CUDASIM_REPORT line:\n${err_with}")
  endif()
  if(CMAKE_MATCH_1 GREATER MAX_SYNCHRONIZE_WITH)
    message(FATAL_ERROR "expected at most ${MAX_SYNCHRONIZE_WITH} synchronizations with the preload, got ${CMAKE_MATCH_1}")
  endif()
endif()
if(DEFINED EXPECT_STDOUT AND NOT out_with MATCHES "${EXPECT_STDOUT}")
  message(FATAL_ERROR "stdout with the preload does not match '${EXPECT_STDOUT}':\n${out_with}")
endif()
if(DEFINED EXPECT_WITH_STDERR AND NOT err_with MATCHES "${EXPECT_WITH_STDERR}")
  message(FATAL_ERROR "stderr with the preload does not match '${EXPECT_WITH_STDERR}':\n${err_with}")
endif()
if(CHECK_FILE)
  if(NOT EXISTS "${CHECK_FILE}")
    message(FATAL_ERROR "${CHECK_FILE} was not written")
  endif()
  file(READ "${CHECK_FILE}" written)
  if(NOT written MATCHES "${CHECK_FILE_REGEX}")
    message(FATAL_ERROR "${CHECK_FILE} does not match '${CHECK_FILE_REGEX}':\n${written}")
  endif()
  message(STATUS "${CHECK_FILE}:\n${written}")
endif()
