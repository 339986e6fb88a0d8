#!/usr/bin/env bash
# Checks that need a real GPU, in under 8 minutes:
#   1. build Release for the local GPU's architecture (nvidia-smi's compute capability);
#   2. run the CTest suite on NVIDIA's runtime instead of cudasim (tests that need cudasim's
#      controls skip themselves);
#   3. run tests/gpu/torch_scenarios.py under PyTorch's own allocator and under cudacache, each
#      in its own process, and print them side by side with a summary table last.
#
# Needs: an NVIDIA GPU and driver, the CUDA 13 toolkit in /usr/local/cuda, the build
# dependencies (tools/install-deps.sh), and a python3 with PyTorch 2.1+ built for CUDA 13
# (pip's torch). Usage: tests/gpu/run_gpu_checks.sh [build-dir]   (default: build/gpu)
# Exit status: 0 when every step passed and every scenario verdict is "ok".
set -euo pipefail

cd "$(dirname "$0")/../.."
repo=$(pwd)
build=${1:-build/gpu}
python=${PYTHON:-python3}
status=0
# Whole run under 8 minutes: each step's timeout is clipped to what is left of BUDGET seconds,
# keeping RESERVE seconds for the PyTorch scenarios until they run.
BUDGET=470
RESERVE=195

step() { printf '\n== %s (%ds elapsed)\n' "$*" "$SECONDS"; }
fail() { echo "FAILED: $*"; status=1; }
# seconds <wanted> [reserve]: the timeout for a step that would like <wanted> seconds.
seconds() {
  local left=$((BUDGET - SECONDS - ${2:-0}))
  ((left < $1)) && set -- "$left"
  ((${1} < 5)) && set -- 5
  echo "$1"
}

step "GPU"
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L; then
  echo "no NVIDIA GPU visible: these checks need one" >&2
  exit 2
fi
capability=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d ' .')
if [[ ! $capability =~ ^[0-9]+$ ]]; then
  echo "could not read the compute capability from nvidia-smi (got '$capability')" >&2
  exit 2
fi
echo "compute capability: $capability"

step "configure and build ($build, CMAKE_CUDA_ARCHITECTURES=$capability)"
timeout "$(seconds 60 $RESERVE)" cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DCMAKE_CUDA_ARCHITECTURES="$capability" \
  -DCUDACACHE_BUILD_BENCHMARKS=OFF -DCUDACACHE_TESTS_ON_CUDASIM=OFF >/tmp/cudacache-gpu-configure.log 2>&1 \
  || { tail -n 40 /tmp/cudacache-gpu-configure.log; exit 1; }
results="$repo/$build/gpu-results"
mkdir -p "$results"
timeout "$(seconds 200 $RESERVE)" cmake --build "$build" -j "$(nproc)" >"$results/build.log" 2>&1 \
  || { tail -n 60 "$results/build.log"; exit 1; }
library=$(ls "$repo/$build"/allocator/libcudacache.so)

step "CTest on NVIDIA's runtime"
# Configured with CUDACACHE_TESTS_ON_CUDASIM=OFF: the tests load NVIDIA's runtime, cudasim's own
# conformance tests are left out and tests that need cudasim's controls skip themselves.
(cd "$build" && timeout "$(seconds 150 $RESERVE)" ctest --output-on-failure -j 4 --timeout 100) \
  || fail "ctest on the real runtime"

step "PyTorch"
if ! timeout "$(seconds 45)" "$python" -c 'import torch, sys
print("torch", torch.__version__, "CUDA", torch.version.cuda)
sys.exit(0 if torch.cuda.is_available() else 3)'; then
  echo "no PyTorch with CUDA for $python: skipping the PyTorch scenarios" >&2
  exit 1
fi
torch_cuda=$("$python" -c 'import torch; print(torch.version.cuda or "")')
if [[ ${torch_cuda%%.*} != 13 ]]; then
  echo "warning: this torch uses CUDA $torch_cuda; libcudacache links libcudart.so.13, so the" \
       "process holds two CUDA runtimes" >&2
fi

for allocator in pytorch cudacache; do
  step "scenarios under $allocator"
  CUDACACHE_LIBRARY=$library PYTHONPATH="$repo/tools/python${PYTHONPATH:+:$PYTHONPATH}" \
    timeout "$(seconds 75)" "$python" tests/gpu/torch_scenarios.py run --allocator "$allocator" \
    --out "$results/$allocator.json" || fail "scenarios under $allocator"
done

step "side by side"
"$python" tests/gpu/torch_scenarios.py compare "$results/pytorch.json" \
  "$results/cudacache.json" || status=1
echo "finished in ${SECONDS}s, status $status; results in $results"
exit "$status"
