#!/usr/bin/env bash
# Checks that need a real GPU, in under 8 minutes:
#   1. build Release for the local GPU's architecture (nvidia-smi's compute capability);
#   2. run the CTest suite on NVIDIA's runtime instead of cudasim (tests that need cudasim's
#      controls skip themselves);
#   3. the VMM backend on this driver and the cost of every kind of device call
#      (tests/gpu/vmm_checks.cpp: median microseconds, what cudaMalloc takes and which of
#      cudasim's two models of it this GPU matches, expandable segments under a cap, and the
#      default policy filling the whole device beside memory it does not know of);
#   3b. the synthetic workload replayed under every in-process allocator (and cudacache with
#      max_page_size_mb:2) with every block stamped and read back (cudacache-replay --real-gpu
#      --check-contents);
#   4. preload: the automated checks of tests/gpu/PRELOAD_CHECKS.md (tests/gpu/preload_checks.sh:
#      libcudacache_preload.so under unmodified programs on NVIDIA's runtime and driver; the
#      programs are compiled while CTest runs, as the GPU build does not define them);
#   5. run tests/gpu/torch_scenarios.py under PyTorch's own allocator and under cudacache, each
#      in its own process, and print them side by side with a summary table last (the
#      preload verdicts at its end).
#
# Needs: an NVIDIA GPU and driver, the CUDA 13 toolkit (/usr/local/cuda, or $CUDACXX, or the
# nvcc on PATH), CMake, ninja, a C++20 compiler, the build dependencies (tools/install-deps.sh's
# packages, or on a machine without a package registry the .deb files of
# tests/gpu/fetch_build_deps.sh in .gpu-deps or $CUDACACHE_BUILD_DEPS), and a python3 with
# PyTorch 2.1+ built for CUDA 13 (pip's torch).
# Usage: tests/gpu/run_gpu_checks.sh [build-dir]   (default: build/gpu)
# Everything it measures and logs is kept in BUILD/gpu-results (one file to take away:
# tar czf gpu-results.tgz -C build/gpu gpu-results).
# Exit status: 0 when every step passed and every scenario and preload verdict is "ok" (or a
# preload check SKIPPED for want of a PyTorch for CUDA 13).
set -euo pipefail

cd "$(dirname "$0")/../.."
repo=$(pwd)
build=${1:-build/gpu}
python=${PYTHON:-python3}
status=0
# Whole run under 8 minutes: each step's timeout is clipped to what is left of BUDGET seconds,
# keeping seconds for the steps still to come: TORCH_RESERVE for the PyTorch steps (35 + 2 x 65),
# PRELOAD_SHARE for the preload checks, RESERVE for both until the preload step runs.
BUDGET=470
TORCH_RESERVE=165
PRELOAD_SHARE=80
RESERVE=$((TORCH_RESERVE + PRELOAD_SHARE))

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

# nvcc: $CUDACXX, else the toolkit's usual place, else the one on PATH.
nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
[[ -x $nvcc ]] || nvcc=$(command -v nvcc || true)
if [[ ! -x $nvcc ]]; then
  echo "no nvcc: set CUDACXX to the CUDA 13 toolkit's nvcc" >&2
  exit 2
fi
results="$repo/$build/gpu-results"
mkdir -p "$results"
# Build dependencies brought as .deb files (tests/gpu/fetch_build_deps.sh, for a machine with no
# package registry): unpacked under the build directory, nothing installed, and found first.
deps=${CUDACACHE_BUILD_DEPS:-.gpu-deps}
prefix_path=()
if compgen -G "$deps/*.deb" >/dev/null; then
  rm -rf "$repo/$build/deps"
  tests/gpu/unpack_build_deps.sh "$deps" "$repo/$build/deps" || exit 1
  prefix_path=(-DCMAKE_PREFIX_PATH="$repo/$build/deps/usr")
fi

step "configure and build ($build, CMAKE_CUDA_ARCHITECTURES=$capability)"
timeout "$(seconds 60 $RESERVE)" cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES="$capability" "${prefix_path[@]}" \
  -DCUDACACHE_BUILD_BENCHMARKS=OFF -DCUDACACHE_TESTS_ON_CUDASIM=OFF >"$results/configure.log" 2>&1 \
  || { tail -n 40 "$results/configure.log"; exit 1; }
timeout "$(seconds 200 $RESERVE)" cmake --build "$build" -j "$(nproc)" >"$results/build.log" 2>&1 \
  || { tail -n 60 "$results/build.log"; exit 1; }
library=$(ls "$repo/$build"/allocator/libcudacache.so)

# The preload's test programs, compiled with nvcc and g++ while CTest runs (CPU work next to a
# GPU-bound suite): the build defines none of them without cudasim.
preload_results=$results/preload
rm -rf "$preload_results"
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$nvcc")")} \
  timeout "$(seconds 120 $RESERVE)" tests/gpu/preload_checks.sh build "$preload_results" \
  "$capability" >"$results/preload-build.log" 2>&1 &
preload_build=$!

step "CTest on NVIDIA's runtime"
# Configured with CUDACACHE_TESTS_ON_CUDASIM=OFF: the tests load NVIDIA's runtime, cudasim's own
# conformance tests are left out and tests that need cudasim's controls skip themselves. The
# install tests (label install) are left out too: they build a consumer project anew and run it
# on cudasim, a check of the packaging that CI makes, not of the GPU.
(cd "$build" && timeout "$(seconds 150 $RESERVE)" ctest --output-on-failure -j 4 --timeout 100 \
  -LE install) \
  || fail "ctest on the real runtime"

step "VMM backend and device-call costs (tests/gpu/vmm_checks.cpp)"
# The measured per-call costs go beside the estimates of tools/replay/device_call_costs.cpp.
timeout "$(seconds 40 $RESERVE)" "$build/tests/gpu/vmm_checks" 20 | tee "$results/vmm.txt" \
  || fail "vmm checks"

step "replays with every block checked on the GPU (cudacache-replay --real-gpu --check-contents)"
# Note [Checked contents]: every block of the synthetic workload stamped through cudaMemcpy and
# read back under each in-process allocator, on NVIDIA's runtime and driver (VMM pages included).
timeout "$(seconds 20 $RESERVE)" "$build/tools/replay/cudacache-replay" --real-gpu \
  --check-contents \
  --allocators cudacache,cudacache:max_page_size_mb:2,pytorch,pytorch-expandable,cub,nocache \
  --synthetic layers:4,hidden:512,heads:8,seq:256,batch:4,vocab:8000,steps:2 \
  | tee "$results/check-contents.txt" || fail "replays with --check-contents"
[[ $(grep -c ': contents checked, ' "$results/check-contents.txt") == 6 ]] \
  || fail "replays with --check-contents: not every allocator was checked"

step "preload (libcudacache_preload.so on NVIDIA's runtime)"
# Checks 1, 3 (and a kernel on reused memory, half of 7), 5, 8 and 9 of PRELOAD_CHECKS.md, one
# PASS/FAIL line each; details and outputs in $preload_results.
wait "$preload_build" || echo "some preload programs did not build: their checks fail" \
  "($results/preload-build.log)"
cat "$results/preload-build.log"
preload_seconds=$(seconds "$PRELOAD_SHARE" $TORCH_RESERVE)
# The checks pace themselves to end 3 s early; the timeout is the backstop.
timeout -k 5 "$preload_seconds" tests/gpu/preload_checks.sh run "$build" "$preload_results" \
  $((preload_seconds - 3)) || fail "preload checks"

# The preload rows for the summary table: a verdict for every planned check (MISSING when the
# step ended before it).
preload_summary() {
  if [[ ! -s $preload_results/checks.txt ]]; then
    printf '  %-40s %s\n' "preload checks" MISSING
    return
  fi
  local name verdict
  while IFS= read -r name; do
    verdict=$(awk -F'\t' -v n="$name" '$1 == n { v = $2 } END { print v }' \
              "$preload_results/verdicts.tsv" 2>/dev/null)
    printf '  %-40s %s\n' "$name" "${verdict:-MISSING}"
    [[ ${verdict:-MISSING} == ok || $verdict == SKIPPED ]] || status=1
  done <"$preload_results/checks.txt"
}

step "PyTorch"
torch_ok=1
if ! timeout "$(seconds 35)" "$python" -c 'import torch, sys
print("torch", torch.__version__, "CUDA", torch.version.cuda)
sys.exit(0 if torch.cuda.is_available() else 3)'; then
  echo "no PyTorch with CUDA for $python: skipping the PyTorch scenarios" >&2
  torch_ok=0
  status=1
else
  torch_cuda=$("$python" -c 'import torch; print(torch.version.cuda or "")')
  if [[ ${torch_cuda%%.*} != 13 ]]; then
    echo "warning: this torch uses CUDA $torch_cuda; libcudacache links libcudart.so.13, so the" \
         "process holds two CUDA runtimes" >&2
  fi
  for allocator in pytorch cudacache; do
    step "scenarios under $allocator"
    CUDACACHE_LIBRARY=$library PYTHONPATH="$repo/tools/python${PYTHONPATH:+:$PYTHONPATH}" \
      timeout "$(seconds 65)" "$python" tests/gpu/torch_scenarios.py run --allocator "$allocator" \
      --out "$results/$allocator.json" || fail "scenarios under $allocator"
  done
fi

step "side by side"
if ((torch_ok)); then
  "$python" tests/gpu/torch_scenarios.py compare "$results/pytorch.json" \
    "$results/cudacache.json" || status=1
else
  printf '\nSummary\n  %-40s verdict\n  %-40s %s\n' scenario "PyTorch scenarios" \
    "MISSING (no PyTorch with CUDA)"
fi
preload_summary
echo "finished in ${SECONDS}s, status $status; results in $results"
exit "$status"
