# Warnings are errors for every target of this project (never for third-party headers,
# which come in through -isystem).
set(CUDACACHE_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion -Werror)

function(cudacache_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX,C>:${CUDACACHE_WARNINGS}>
    $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
endfunction()
