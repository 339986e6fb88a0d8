#!/usr/bin/env bash
# Downloads the build dependencies a GPU machine may lack, for run_gpu_checks.sh to build with
# there: GPU machines lent for a few minutes often have the CUDA toolkit, CMake, a compiler and
# PyTorch but no package registry (this workplace's have none). Run it here, on a Debian or
# Ubuntu machine with apt (the one that runs tools/install-deps.sh), and take DIR to the GPU
# machine with the checkout; run_gpu_checks.sh unpacks every .deb it finds in DIR under its
# build directory (nothing is installed) and points CMake there first.
#
#   tests/gpu/fetch_build_deps.sh [DIR]   (default: .gpu-deps, which git ignores)
#
# What it fetches: spdlog and fmt (headers and the shared libraries their CMake packages name),
# GoogleTest and GoogleMock (static libraries), CLI11 (headers): about 1 MB. Benchmarks are
# not built on the GPU machine, so Google Benchmark is not among them. The libraries are built
# for this machine's architecture and C++ runtime: the GPU machine needs the same architecture
# and a libstdc++ at least as new.
set -euo pipefail

cd "$(dirname "$0")/../.."
dir=${1:-.gpu-deps}
packages=(libspdlog-dev libfmt-dev libgtest-dev libgmock-dev libcli11-dev)
if ! command -v apt-get >/dev/null || ! command -v apt-cache >/dev/null; then
  echo "fetch_build_deps.sh: needs apt-get (a Debian or Ubuntu machine)" >&2
  exit 1
fi
# The shared libraries the -dev packages depend on (spdlog's and fmt's CMake packages name
# them; a missing one stops CMake), and nothing else: compilers and test data are not needed.
runtime=()
for package in libspdlog-dev libfmt-dev; do
  while read -r dependency; do
    if [[ $dependency =~ ^lib(spdlog|fmt)[0-9.]+$ ]]; then runtime+=("$dependency"); fi
  done < <(apt-cache depends "$package" | sed -n 's/^ *Depends: //p')
done
if ((${#runtime[@]} != 2)); then
  echo "fetch_build_deps.sh: expected spdlog's and fmt's shared-library packages among the" \
       "dependencies, found: ${runtime[*]:-none} (run apt-get update first?)" >&2
  exit 1
fi
# Only the packages of an earlier run are removed: DIR may be a folder of other things.
mkdir -p "$dir"
rm -f "$dir"/*.deb
# apt-get download writes into the current directory, as the user _apt where it can.
(cd "$dir" && apt-get download "${packages[@]}" "${runtime[@]}")
count=$(find "$dir" -maxdepth 1 -name '*.deb' | wc -l)
if ((count != ${#packages[@]} + ${#runtime[@]})); then
  echo "fetch_build_deps.sh: $count packages in $dir, expected $((${#packages[@]} + ${#runtime[@]}))" >&2
  exit 1
fi
echo "fetch_build_deps.sh: $count packages ($(du -sh "$dir" | cut -f1)) in $dir"
