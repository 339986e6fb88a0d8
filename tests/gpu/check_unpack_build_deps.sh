#!/usr/bin/env bash
# CTest gpu.unpack_build_deps: unpack_build_deps.sh, which run_gpu_checks.sh uses on a GPU
# machine with no package registry, must not rot where no GPU runs it. Builds two small .deb
# files (xz and gzip data, as Debian and older Ubuntu make them) and checks that they unpack
# with dpkg-deb and without it (ar and tar alone), and that a folder with no .deb or a broken
# one is an error.
#
#   check_unpack_build_deps.sh WORK_DIR
set -euo pipefail

script=$(cd "$(dirname "$0")" && pwd)/unpack_build_deps.sh
work=$1
rm -rf "$work"
mkdir -p "$work/debs"

fail() { echo "check_unpack_build_deps: $*" >&2; exit 1; }

# make_deb NAME COMPRESSION: a package holding usr/include/NAME/NAME.h.
make_deb() {
  local tree=$work/tree-$1
  mkdir -p "$tree/DEBIAN" "$tree/usr/include/$1"
  printf 'Package: %s\nVersion: 1.0\nArchitecture: all\nMaintainer: cudacache\nDescription: test\n' \
    "$1" >"$tree/DEBIAN/control"
  echo "#define ${1^^} 1" >"$tree/usr/include/$1/$1.h"
  dpkg-deb -Z"$2" --build "$tree" "$work/debs/$1.deb" >/dev/null
}
make_deb alpha xz
make_deb beta gzip

check_unpacked() {  # check_unpacked PREFIX
  for name in alpha beta; do
    grep -q "#define ${name^^} 1" "$1/usr/include/$name/$name.h" \
      || fail "$name.h missing from $1"
  done
}

# With dpkg-deb.
"$script" "$work/debs" "$work/with-dpkg" | grep -q '2 packages' || fail "not 2 packages (dpkg-deb)"
check_unpacked "$work/with-dpkg"

# Without it: a PATH of the tools the ar path needs, and no dpkg-deb.
bin=$work/bin
mkdir -p "$bin"
for tool in bash mkdir ar grep tar xz gzip sed; do
  ln -s "$(command -v "$tool")" "$bin/$tool"
done
PATH=$bin "$script" "$work/debs" "$work/with-ar" | grep -q '2 packages' \
  || fail "not 2 packages (ar and tar)"
check_unpacked "$work/with-ar"

# No .deb, and a broken one: errors that say so.
mkdir -p "$work/empty"
if "$script" "$work/empty" "$work/none" 2>"$work/empty.err"; then fail "an empty folder passed"; fi
grep -q 'no .deb' "$work/empty.err" || fail "no message for an empty folder"
mkdir -p "$work/broken"
echo "not a package" >"$work/broken/broken.deb"
for path in "$PATH" "$bin"; do
  if PATH=$path "$script" "$work/broken" "$work/broken-out" 2>"$work/broken.err"; then
    fail "a broken .deb passed (PATH=$path)"
  fi
  grep -q 'could not unpack' "$work/broken.err" || fail "no message for a broken .deb"
done
echo "check_unpack_build_deps: ok"
