#!/usr/bin/env bash
# Unpacks every .deb in DIR (tests/gpu/fetch_build_deps.sh's) into PREFIX, installing nothing:
# run_gpu_checks.sh then points CMake at PREFIX/usr. With dpkg-deb where there is one, else as
# the ar archive a .deb is, whose data.tar.* member holds the files (a GPU machine's image may
# have binutils but no dpkg).
#
#   tests/gpu/unpack_build_deps.sh DIR PREFIX
#
# Prints how many packages it unpacked; exit status 1 when DIR holds none or one fails.
set -euo pipefail

if (($# != 2)); then
  sed -n '2,10p' "$0" >&2
  exit 2
fi
dir=$1
prefix=$2

unpack() {
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$1" "$2"
    return
  fi
  local member
  member=$(ar t "$1" | grep '^data\.tar') || return 1
  case $member in
    *.xz) ar p "$1" "$member" | tar -x -J -C "$2" ;;
    *.zst) ar p "$1" "$member" | tar -x --zstd -C "$2" ;;
    *.gz) ar p "$1" "$member" | tar -x -z -C "$2" ;;
    *) ar p "$1" "$member" | tar -x -C "$2" ;;
  esac
}

mkdir -p "$prefix"
count=0
for deb in "$dir"/*.deb; do
  [[ -e $deb ]] || break
  unpack "$deb" "$prefix" || { echo "unpack_build_deps.sh: could not unpack $deb" >&2; exit 1; }
  count=$((count + 1))
done
if ((count == 0)); then
  echo "unpack_build_deps.sh: no .deb in '$dir' (tests/gpu/fetch_build_deps.sh fetches them)" >&2
  exit 1
fi
echo "unpack_build_deps.sh: $count packages from $dir unpacked in $prefix"
