#!/usr/bin/env bash
# Installs cudacache's build and test dependencies from Debian's packages.
# The CUDA toolkit (13.x, nvcc at /usr/local/cuda/bin) is assumed to be installed already.
# Do not add libcub-dev: its old /usr/include/cub would shadow the toolkit's CUB.
set -euo pipefail
sudo_cmd=""
if [ "$(id -u)" -ne 0 ]; then sudo_cmd="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo_cmd apt-get update -qq
# chromium (headless) and a font: the browser test of the --html page (tests/html).
# --clang adds clang and its sanitizer/libFuzzer runtimes, for the `clang` preset (CI).
extra=()
if [ "${1:-}" = "--clang" ]; then extra=(clang libclang-rt-dev clang-format); fi
$sudo_cmd apt-get install -y -qq --no-install-recommends \
  cmake ninja-build g++ pkg-config python3 python3-pytest python3-venv \
  chromium fonts-dejavu-core \
  libspdlog-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev "${extra[@]}" >/dev/null
if ! [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "install-deps: the CUDA toolkit is missing (expected /usr/local/cuda/bin/nvcc)" >&2
  exit 1
fi
echo "install-deps: dependencies are installed"
