#!/usr/bin/env bash
# Fails (and lists the files) when a tracked C, C++ or CUDA source differs from what
# clang-format makes of it with the repository's .clang-format. Fix with:
#   git ls-files '*.cpp' '*.h' '*.hpp' '*.c' '*.cu' '*.cuh' | xargs clang-format -i
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.hpp' '*.c' '*.cu' '*.cuh')
bad=()
for file in "${files[@]}"; do
  if ! clang-format --dry-run --Werror "$file" >/dev/null 2>&1; then bad+=("$file"); fi
done
if [ "${#bad[@]}" -ne 0 ]; then
  echo "check-format: ${#bad[@]} of ${#files[@]} files are not clang-formatted:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
