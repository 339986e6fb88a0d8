# Runs a command and requires every regular expression in EXPECT to match its combined output
# (CTest's PASS_REGULAR_EXPRESSION passes when any one matches). The exit status is ignored:
# used where the program cannot succeed (no real driver) but must get far enough.
# cmake -DCOMMAND=prog^^args -DENV=A=1^^B=2 -DEXPECT=regex^^regex -P check_output.cmake
cmake_minimum_required(VERSION 3.25)
foreach(list_var COMMAND ENV EXPECT)
  string(REPLACE "^^" ";" ${list_var} "${${list_var}}")
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -E env ${ENV} ${COMMAND}
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
foreach(regex IN LISTS EXPECT)
  if(NOT "${out}${err}" MATCHES "${regex}")
    message(FATAL_ERROR "output does not match '${regex}' (exit status ${rc}):\n${out}${err}")
  endif()
endforeach()
message(STATUS "all expected lines found (exit status ${rc})")
