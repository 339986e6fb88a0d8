#!/bin/sh
# cudasim-run PROGRAM [ARGS...]: runs an unmodified program on cudasim, the simulated CUDA
# runtime, with the libraries next to this script preloaded: libcudart.so.13 (in place of
# NVIDIA's, even for libraries that find NVIDIA's through their RPATH, as PyTorch's do),
# libcuda.so.1 and libnvidia-ml.so.1 (which PyTorch dlopens). CUDASIM_* variables apply as
# usual, e.g.:
#   CUDASIM_CAPACITY=24GiB build/release/tools/cudasim/cudasim-run python3 train.py
# Next to the libraries in a build tree; installed, in <prefix>/bin with them in
# <prefix>/lib*/cudacache/cudasim.
dir=$(cd "$(dirname "$0")" && pwd)
for libs in "$dir" "$dir"/../lib/cudacache/cudasim "$dir"/../lib64/cudacache/cudasim \
  "$dir"/../lib/*/cudacache/cudasim; do
  [ -e "$libs/libcudart.so.13" ] && break
done
if [ ! -e "$libs/libcudart.so.13" ]; then
  echo "cudasim-run: cudasim's libcudart.so.13 not found next to $0 or in ../lib/cudacache/cudasim" >&2
  exit 127
fi
preload="$libs/libcudart.so.13:$libs/libcuda.so.1:$libs/libnvidia-ml.so.1"
# After what LD_PRELOAD already holds: a sanitizer runtime must stay first, and cudacache's
# preload must come before cudasim's runtime to interpose on it (in front, cudasim's
# cudaMalloc would be the one every call found).
export LD_PRELOAD="${LD_PRELOAD:+$LD_PRELOAD:}$preload"
exec "$@"
