# cmake -DINPUT=memory_page.html -DOUTPUT=memory_page_template.h -DNAME=kMemoryPageTemplate -P
# embed_template.cmake: the file as a C++ raw string literal, so that cudacache-replay carries
# the page template (the Python package reads the same file at run time).
file(READ "${INPUT}" text)
set(delimiter "cudacache_page")
string(FIND "${text}" ")${delimiter}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw-string delimiter )${delimiter}\"")
endif()
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${INPUT} by embed_template.cmake; do not edit.\n"
  "#pragma once\n#include <string_view>\n"
  "inline constexpr std::string_view ${NAME} = R\"${delimiter}(${text})${delimiter}\";\n")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
