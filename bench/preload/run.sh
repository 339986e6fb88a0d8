#!/usr/bin/env bash
# Benchmark of libcudacache_preload.so: unmodified allocation-heavy programs run on cudasim
# with and without LD_PRELOAD. Prints device allocation calls (CUDASIM_REPORT) and wall time
# (best of REPEATS runs). Use a Release build:
#
#   cmake --preset release && cmake --build --preset release --target cudacache_preload \
#     cudasim preload_alloc_program_nvcc preload_threaded_stress
#   bench/preload/run.sh build/release [ROUNDS] [REPEATS]
#
# On a machine with a GPU, PRELOAD_BENCH_REAL_RUNTIME=1 runs on NVIDIA's runtime instead of
# cudasim (the device-call columns are then empty: only cudasim reports them).
set -euo pipefail

build=$(cd "${1:-build/release}" && pwd)
rounds=${2:-20000}
repeats=${3:-5}
preload="$build/preload/libcudacache_preload.so"
if [[ "${PRELOAD_BENCH_REAL_RUNTIME:-0}" != 1 ]]; then
  export LD_LIBRARY_PATH="$build/tools/cudasim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export CUDASIM_REPORT=1
fi
for file in "$preload" "$build/tests/preload/preload_alloc_program_nvcc" \
            "$build/tests/preload/preload_threaded_stress"; do
  [[ -e "$file" ]] || { echo "missing $file (build the targets listed in $0)" >&2; exit 1; }
done

# run PRELOAD COMMAND...: prints "mallocs frees best_ms stdout"
run() {
  local preload_value=$1; shift
  local best="" mallocs="" frees="" out=""
  for ((i = 0; i < repeats; ++i)); do
    local err start end ms
    err=$(mktemp)
    start=$(date +%s%N)
    out=$(LD_PRELOAD="$preload_value" "$@" 2>"$err")
    end=$(date +%s%N)
    ms=$(( (end - start) / 1000000 ))
    [[ -z "$best" || $ms -lt $best ]] && best=$ms
    mallocs=$(sed -n 's/.*cudasim: mallocs=\([0-9]*\) frees=\([0-9]*\).*/\1/p' "$err")
    frees=$(sed -n 's/.*cudasim: mallocs=\([0-9]*\) frees=\([0-9]*\).*/\2/p' "$err")
    rm -f "$err"
  done
  # "-" keeps the columns aligned when the runtime reports no counters (a real GPU).
  echo "${mallocs:--} ${frees:--} $best $out"
}

printf '%-34s %-8s %14s %12s %12s %9s  %s\n' program preload "device mallocs" "device frees" \
  "wall ms" speedup output
bench() {
  local name=$1; shift
  read -r m0 f0 t0 out0 < <(run "" "$@")
  read -r m1 f1 t1 out1 < <(run "$preload" "$@")
  local same="identical"; [[ "$out0" == "$out1" ]] || same="DIFFERENT"
  printf '%-34s %-8s %14s %12s %12s %9s  %s\n' "$name" no "$m0" "$f0" "$t0" "" "$out0"
  printf '%-34s %-8s %14s %12s %12s %9s  %s\n' "" yes "$m1" "$f1" "$t1" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { if (b > 0) printf "%.1fx", a / b; else print "-" }')" \
    "$same"
}
# The plain pair loop, built here the way any program is built against the shared runtime.
cuda_home=${CUDA_HOME:-/usr/local/cuda}
loop=$(mktemp -d)/alloc_free_loop
"${CXX:-g++}" -O2 -std=c++17 -I"$cuda_home/include" "$(dirname "$0")/alloc_free_loop.cpp" \
  -o "$loop" -L"$cuda_home/lib64" -lcudart -Wl,-rpath,"$cuda_home/lib64" -Wl,--enable-new-dtags

pairs=$((rounds * 10))
bench "alloc_free_loop ($pairs x 1 KiB)" "$loop" "$pairs" 1024
bench "alloc_free_loop ($pairs x 24 MiB)" "$loop" "$pairs" 25165824
bench "alloc_program (nvcc, $rounds rounds)" "$build/tests/preload/preload_alloc_program_nvcc" "$rounds"
bench "threaded_stress (4 x $rounds ops)" "$build/tests/preload/preload_threaded_stress" 4 "$rounds"
