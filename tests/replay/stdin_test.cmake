# cudacache-replay reads a trace piped into it as `-` and writes --json - to stdout:
#   cmake -DREPLAY=<cudacache-replay> -DTRACE=<small.csv> -P stdin_test.cmake
# Fails unless the tool exits 0, its stdout is the JSON of a trace named "stdin" with the CSV's
# events, and the table went to stderr.
foreach(var REPLAY TRACE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "stdin_test.cmake: -D${var}=... is required")
  endif()
endforeach()
execute_process(
  COMMAND "${REPLAY}" --allocators nocache --json - -
  INPUT_FILE "${TRACE}"
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err
  RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "cudacache-replay - < ${TRACE}: exit status ${status}\n${err}")
endif()
string(JSON name ERROR_VARIABLE json_error GET "${out}" traces 0 name)
if(json_error)
  message(FATAL_ERROR "stdout is not the expected JSON (${json_error}):\n${out}")
endif()
string(JSON events GET "${out}" traces 0 events)
string(JSON peak GET "${out}" traces 0 peak_requested_bytes)
string(JSON input GET "${out}" context inputs 0)
if(NOT name STREQUAL "stdin" OR NOT events EQUAL 4 OR NOT peak EQUAL 3670016 OR
   NOT input STREQUAL "-")
  message(FATAL_ERROR "unexpected figures: name ${name}, events ${events}, peak ${peak}, "
                      "input ${input}\n${out}")
endif()
if(NOT err MATCHES "== stdin")
  message(FATAL_ERROR "the table did not go to stderr:\n${err}")
endif()
message(STATUS "read the trace from stdin: ${events} events, JSON on stdout")
