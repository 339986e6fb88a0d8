#!/bin/sh
# cudasim-run PROGRAM [ARGS...]: runs an unmodified program on cudasim, the simulated CUDA
# runtime, with the libraries next to this script preloaded: libcudart.so.13 (in place of
# NVIDIA's, even for libraries that find NVIDIA's through their RPATH, as PyTorch's do),
# libcuda.so.1 and libnvidia-ml.so.1 (which PyTorch dlopens). CUDASIM_* variables apply as
# usual, e.g.:
#   CUDASIM_CAPACITY=24GiB build/release/tools/cudasim/cudasim-run python3 train.py
dir=$(cd "$(dirname "$0")" && pwd)
preload="$dir/libcudart.so.13:$dir/libcuda.so.1:$dir/libnvidia-ml.so.1"
export LD_PRELOAD="$preload${LD_PRELOAD:+:$LD_PRELOAD}"
exec "$@"
