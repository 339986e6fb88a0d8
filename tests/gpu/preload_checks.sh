#!/usr/bin/env bash
# The automated part of tests/gpu/PRELOAD_CHECKS.md: libcudacache_preload.so under NVIDIA's
# runtime and driver. run_gpu_checks.sh drives it in two halves:
#
#   preload_checks.sh build OUT ARCH
#       compiles the test programs (tests/preload and preload_kernel_program.cu here) with nvcc
#       and g++ into OUT/tree/tests/preload, named like the CMake targets. The GPU build
#       (CUDACACHE_TESTS_ON_CUDASIM=OFF) defines none of them: tests/preload/CMakeLists.txt
#       returns early without cudasim. Needs no GPU; ARCH is the compute capability (90).
#   preload_checks.sh run BUILD OUT SECONDS
#       runs the checks against BUILD/preload/libcudacache_preload.so within SECONDS, one
#       "PASS|FAIL|SKIP  preload N: ..." line each, verdicts in OUT/verdicts.tsv (name, verdict
#       ok/FAIL/SKIPPED, detail) for the summary table, logs and outputs in OUT/.
#
# Exit status of run: 0 when no check failed. Environment: CUDA_HOME (/usr/local/cuda), PYTHON
# (python3), CUDACACHE_CUDART (the real libcudart.so.13 for check 5; found when unset).
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
python=${PYTHON:-python3}
sources=$repo/tests/preload

# The checks, in order, as they appear in the summary table.
CHECKS=("preload 1: nvcc -cudart shared program" "preload 1: g++ program" \
        "preload 1: g++ per-thread stream program" "preload 1: threaded stress" \
        "preload 3: static runtime program" "preload 3/7: kernels, free then reuse" \
        "preload 5: ctypes, real libcudart" "preload 8: cudaMemGetInfo" \
        "preload 8: passthrough, cudaDeviceReset" "preload 9: benchmark, real runtime" \
        "preload 5: torch, no caching" "preload 10: CUDA graph allocating stream-ordered")

usage() { sed -n '2,16p' "$0" >&2; exit 2; }

# build_passthrough DIR: the RTLD_NEXT probe library (without sibling calls, as in
# tests/preload/CMakeLists.txt), then the program that links it.
build_passthrough() {
  g++ -O2 -shared -fPIC -fno-optimize-sibling-calls "$sources/next_probe.cpp" -ldl \
    -o "$1/libpreload_next_probe.so" &&
    g++ -O2 -std=c++17 -I"$cuda/include" "$sources/passthrough_program.cpp" \
      -o "$1/preload_passthrough_program" -L"$1" -lpreload_next_probe -L"$cuda/lib64" -lcudart \
      -ldl -Wl,--enable-new-dtags -Wl,-rpath,"\$ORIGIN:$cuda/lib64"
}

build_programs() {
  local out=$1 arch=$2
  local dir=$out/tree/tests/preload
  mkdir -p "$dir" "$out/logs"
  local cxx=(g++ -O2 -std=c++17 -I"$cuda/include" -pthread)
  # shellcheck disable=SC2054  # the commas belong to -Wl
  local link=(-L"$cuda/lib64" -lcudart -ldl -Wl,--enable-new-dtags -Wl,-rpath,"$cuda/lib64")
  local nvcc=("$cuda/bin/nvcc" -O2 -std=c++17 -arch=sm_"$arch")
  local pids=() names=()
  compile() {  # compile NAME COMMAND...
    local name=$1; shift
    "$@" >"$out/logs/build-$name.log" 2>&1 &
    pids+=($!); names+=("$name")
  }
  # Shared runtime, as CMake builds them (CUDA_RUNTIME_LIBRARY Shared, CUDA::cudart).
  compile preload_alloc_program_nvcc "${nvcc[@]}" -cudart shared "$sources/alloc_program.cu" \
    -o "$dir/preload_alloc_program_nvcc" -Xlinker --enable-new-dtags,-rpath,"$cuda/lib64"
  compile preload_alloc_program "${cxx[@]}" "$sources/alloc_program.cpp" \
    -o "$dir/preload_alloc_program" "${link[@]}"
  compile preload_alloc_program_ptds "${cxx[@]}" -DCUDA_API_PER_THREAD_DEFAULT_STREAM \
    "$sources/alloc_program.cpp" -o "$dir/preload_alloc_program_ptds" "${link[@]}"
  compile preload_threaded_stress "${cxx[@]}" "$sources/threaded_stress.cpp" \
    -o "$dir/preload_threaded_stress" "${link[@]}"
  compile preload_memgetinfo_program "${cxx[@]}" "$sources/memgetinfo_program.cpp" \
    -o "$dir/preload_memgetinfo_program" "${link[@]}"
  compile preload_passthrough_program build_passthrough "$dir"
  # nvcc's default: the static runtime (check 3), plain as PRELOAD_CHECKS.md says.
  compile preload_alloc_program_static "$cuda/bin/nvcc" -O2 -arch=sm_"$arch" \
    "$sources/alloc_program.cu" -o "$dir/preload_alloc_program_static"
  compile preload_kernel_program "$cuda/bin/nvcc" -O2 -arch=sm_"$arch" \
    "$repo/tests/gpu/preload_kernel_program.cu" -o "$dir/preload_kernel_program"
  compile preload_graph_program "$cuda/bin/nvcc" -O2 -arch=sm_"$arch" \
    "$repo/tests/gpu/preload_graph_program.cu" -o "$dir/preload_graph_program"
  local failed=0 i
  for i in "${!pids[@]}"; do
    if wait "${pids[$i]}"; then
      echo "built ${names[$i]}"
    else
      echo "FAILED to build ${names[$i]}:"; tail -n 20 "$out/logs/build-${names[$i]}.log"
      failed=1
    fi
  done
  return "$failed"
}

# ---------------------------------------------------------------------------------------------
# verdict NAME ok|FAIL|SKIPPED DETAIL: the line for the log and the row for the summary.
verdict() {
  local word=PASS
  [[ $2 == FAIL ]] && word=FAIL && status=1
  [[ $2 == SKIPPED ]] && word=SKIP
  printf '%-4s  %s: %s\n' "$word" "$1" "$3"
  printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$out/verdicts.tsv"
}

# limit WANTED: a timeout for one program run, clipped to what is left before the deadline.
limit() {
  local left=$((deadline - SECONDS))
  ((left < $1)) && set -- "$left"
  ((${1} < 1)) && set -- 1
  echo "$1"
}

# run_logged LABEL COMMAND...: runs COMMAND (its environment given with env), stdout and
# stderr to OUT/LABEL.out and OUT/LABEL.err; returns its exit status (124: timed out).
run_logged() {
  local label=$1; shift
  ((deadline - SECONDS >= 2)) || { echo "no time left" >"$out/$label.err"; return 124; }
  timeout -k 2 "$(limit 30)" "$@" >"$out/$label.out" 2>"$out/$label.err"
}

# first_line PREFIX: the first line of PREFIX.out, else the last of PREFIX.err (a Python
# traceback's last line): what a program said.
first_line() {
  local line
  line=$(grep -v '^ *$' "$1.out" 2>/dev/null | head -n1)
  [[ -n $line ]] || line=$(grep -v '^ *$' "$1.err" 2>/dev/null | tail -n1)
  echo "${line:0:100}"
}

# totals STATS_FILE: "requests device_mallocs" summed over the devices in a
# CUDACACHE_STATS_AT_EXIT summary (exit_summary.cpp), or nothing when there is none.
totals() {
  [[ -s $1 ]] || return 0
  awk '/^ *[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ / { r += $2; m += $5; n++ }
       END { if (n) print r, m }' "$1"
}

# same_output LABEL MIN_REQUESTS MAX_MALLOC_PERCENT [VAR=value...] -- COMMAND...: runs COMMAND
# without and with the preload (the VAR=value settings in both runs). True when both exit 0
# with the same standard output, caching is on, and the summary shows at least MIN_REQUESTS
# requests with device mallocs at most MAX_MALLOC_PERCENT of them. Sets $detail either way.
same_output() {
  local label=$1 min_requests=$2 max_percent=$3; shift 3
  local env=()
  while [[ $1 != -- ]]; do env+=("$1"); shift; done
  shift
  local stats=$out/$label.stats rc_without rc_with
  rm -f "$stats"
  run_logged "$label.without" env -u LD_PRELOAD "${env[@]}" "$@"; rc_without=$?
  run_logged "$label.with" env "${env[@]}" LD_PRELOAD="$preload" \
    CUDACACHE_STATS_AT_EXIT="$stats" "$@"; rc_with=$?
  local counts requests mallocs
  counts=$(totals "$stats")
  read -r requests mallocs <<<"${counts:-0 0}"
  if ((rc_without != 0 || rc_with != 0)); then
    detail="exit status $rc_without without, $rc_with with the preload$( ((rc_without == 124 ||
      rc_with == 124)) && echo ' (124: timed out)'): '$(first_line "$out/$label.with")'; see $out/$label.*"
  elif ! diff -u "$out/$label.without.out" "$out/$label.with.out" >"$out/$label.diff"; then
    detail="standard output differs with the preload: $out/$label.diff"
  elif grep -q '^caching disabled' "$stats" 2>/dev/null; then
    detail=$(grep '^caching disabled' "$stats")
  elif ((requests < min_requests)); then
    detail="summary shows $requests requests, expected at least $min_requests ($stats)"
  elif ((mallocs * 100 > requests * max_percent)); then
    detail="device mallocs $mallocs not within $max_percent% of the $requests requests ($stats)"
  else
    detail="identical output '$(head -n1 "$out/$label.with.out" | cut -c1-60)'; requests=$requests device mallocs=$mallocs"
    return 0
  fi
  return 1
}

# compare NAME LABEL MIN_REQUESTS MAX_MALLOC_PERCENT [VAR=value...] -- COMMAND...: same_output,
# then the verdict.
compare() {
  local name=$1; shift
  if same_output "$@"; then verdict "$name" ok "$detail"; else verdict "$name" FAIL "$detail"; fi
}

# with_preload NAME LABEL EXPECTED MIN_REQUESTS [VAR=value...] -- COMMAND...: runs COMMAND once,
# with the preload; passes when it exits 0, its first line of standard output is EXPECTED and the
# summary shows at least MIN_REQUESTS requests.
with_preload() {
  local name=$1 label=$2 expected=$3 min_requests=$4; shift 4
  local env=()
  while [[ $1 != -- ]]; do env+=("$1"); shift; done
  shift
  local stats=$out/$label.stats rc counts requests mallocs
  rm -f "$stats"
  run_logged "$label.with" env "${env[@]}" LD_PRELOAD="$preload" \
    CUDACACHE_STATS_AT_EXIT="$stats" "$@"; rc=$?
  counts=$(totals "$stats")
  read -r requests mallocs <<<"${counts:-0 0}"
  local got
  got=$(first_line "$out/$label.with")
  if ((rc == 0)) && [[ $got == "$expected" ]] && ((requests >= min_requests)); then
    verdict "$name" ok "'$got'; requests=$requests device mallocs=$mallocs"
  else
    verdict "$name" FAIL "exit status $rc, '$got' (expected '$expected'), requests=$requests (at least $min_requests); see $out/$label.*"
  fi
}

# present NAME PROGRAM: false, with a FAIL verdict, when PROGRAM was not built.
present() {
  [[ -x $2 ]] && return 0
  verdict "$1" FAIL "$(basename "$2") was not built (see $out/logs/build-*.log)"
  return 1
}

# The real libcudart.so.13: CUDACACHE_CUDART, the toolkit's, or the nvidia pip wheel's.
find_cudart() {
  if [[ -n ${CUDACACHE_CUDART:-} ]]; then echo "$CUDACACHE_CUDART"; return; fi
  local candidate
  for candidate in "$cuda/lib64/libcudart.so.13" "$cuda/targets/x86_64-linux/lib/libcudart.so.13"; do
    [[ -e $candidate ]] && { echo "$candidate"; return; }
  done
  "$python" - <<'EOF' 2>/dev/null
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()]
for root in roots:
    found = sorted(glob.glob(os.path.join(root, "nvidia", "**", "libcudart.so.13"), recursive=True))
    if found:
        print(found[0]); sys.exit(0)
EOF
}

run_checks() {
  local build=$1 seconds=$2
  deadline=$((SECONDS + seconds))
  preload=$(cd "$build" && pwd)/preload/libcudacache_preload.so
  status=0
  mkdir -p "$out"
  : >"$out/verdicts.tsv"
  printf '%s\n' "${CHECKS[@]}" >"$out/checks.txt"
  if [[ ! -f $preload ]]; then
    local name
    for name in "${CHECKS[@]}"; do verdict "$name" FAIL "no $preload"; done
    return 1
  fi
  # bench/preload/run.sh wants a build tree: the library next to the programs built here.
  local tree=$out/tree T=$out/tree/tests/preload
  mkdir -p "$tree/preload"
  ln -sf "$preload" "$tree/preload/libcudacache_preload.so"
  echo "preload: $preload"
  local runtime
  runtime=$(LD_TRACE_LOADED_OBJECTS=1 "$T/preload_alloc_program" 2>/dev/null |
            grep -o '/[^ ]*libcudart[^ ]*' || echo '?')
  echo "runtime of the shared-runtime programs: $runtime"
  [[ $runtime == *cudasim* ]] &&
    echo "warning: that is cudasim's runtime, not NVIDIA's (LD_LIBRARY_PATH): a dry run"
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"

  # 1. Shared-runtime programs on NVIDIA's runtime: identical output, cudacache serves them.
  local name program
  for program in "preload 1: nvcc -cudart shared program=preload_alloc_program_nvcc" \
                 "preload 1: g++ program=preload_alloc_program" \
                 "preload 1: g++ per-thread stream program=preload_alloc_program_ptds"; do
    name=${program%=*} program=${program##*=}
    present "$name" "$T/$program" && compare "$name" "$program" 2000 10 -- "$T/$program" 1000
  done
  name="preload 1: threaded stress"
  present "$name" "$T/preload_threaded_stress" &&
    with_preload "$name" threaded_stress 'threads=8 operations=5000 ok' 1000 -- \
      "$T/preload_threaded_stress" 8 5000

  # 3. nvcc's default static runtime: served through dlsym + cuGetProcAddress_v2 and the
  # private libcudart.so.13, which the loader must find (the toolkit's, as for any user).
  local cudart cudart_dir
  cudart=$(find_cudart)
  cudart_dir=$(dirname "${cudart:-$cuda/lib64/x}")
  local static_env=(LD_LIBRARY_PATH="$cudart_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
                    CUDACACHE_LOG_LEVEL=debug)
  name="preload 3: static runtime program"
  if present "$name" "$T/preload_alloc_program_static"; then
    local private='opened libcudart.so.13 privately: ok'
    if ! same_output alloc_program_static 2000 10 "${static_env[@]}" -- \
         "$T/preload_alloc_program_static" 1000; then
      verdict "$name" FAIL "$detail"
    elif ! grep -q "$private" "$out/alloc_program_static.with.err"; then
      verdict "$name" FAIL "no '$private' in $out/alloc_program_static.with.err"
    else
      verdict "$name" ok "$detail; private runtime opened"
    fi
  fi
  name="preload 3/7: kernels, free then reuse"
  present "$name" "$T/preload_kernel_program" &&
    compare "$name" kernel_program 200 10 "${static_env[@]}" -- "$T/preload_kernel_program" 100
  # 10. A graph that allocates and frees stream-ordered, launched while another stream
  # allocates: the captured allocation must be the graph's (a graph memory node), not the cache's.
  name="preload 10: CUDA graph allocating stream-ordered"
  present "$name" "$T/preload_graph_program" &&
    compare "$name" graph_program 50 10 "${static_env[@]}" -- "$T/preload_graph_program" 50

  # 5. Python loading the real runtime privately (ctypes, RTLD_LOCAL).
  local interpreter
  interpreter=$("$python" -c 'import sys; print(sys.executable)' 2>/dev/null)
  name="preload 5: ctypes, real libcudart"
  if [[ -z $cudart || -z $interpreter ]]; then
    verdict "$name" FAIL "no libcudart.so.13 (set CUDACACHE_CUDART) or no $python"
  else
    compare "$name" ctypes_program 1000 10 -- "$interpreter" "$sources/ctypes_program.py" \
      "$cudart" 1000
  fi

  # 8. cudaMemGetInfo with cached memory, memory the preload did not hand out, cudaDeviceReset.
  name="preload 8: cudaMemGetInfo"
  present "$name" "$T/preload_memgetinfo_program" &&
    compare "$name" memgetinfo_program 1 100 -- "$T/preload_memgetinfo_program"
  name="preload 8: passthrough, cudaDeviceReset"
  present "$name" "$T/preload_passthrough_program" &&
    compare "$name" passthrough_program 0 100 -- "$T/preload_passthrough_program"

  # 9. The benchmark on NVIDIA's runtime, small: wall times only (no device-call columns).
  # 25 s stay for the PyTorch check after it when there is a torch module.
  local torch_seconds=0
  [[ -n $interpreter ]] && "$interpreter" -c 'import importlib.util, sys
sys.exit(importlib.util.find_spec("torch") is None)' 2>/dev/null && torch_seconds=25
  name="preload 9: benchmark, real runtime"
  local left=$((deadline - SECONDS - torch_seconds - 1))
  if ((left < 10)); then
    verdict "$name" FAIL "not run: $((left > 0 ? left : 0))s left in this step (with ${torch_seconds}s kept for the PyTorch check)"
  else
    PRELOAD_BENCH_REAL_RUNTIME=1 timeout -k 2 "$left" "$repo/bench/preload/run.sh" "$tree" 1000 1 \
      >"$out/bench.out" 2>"$out/bench.err"
    local rc=$?
    cat "$out/bench.out"
    if ((rc == 124 || rc == 137)); then
      verdict "$name" FAIL "timed out after ${left}s (rows so far above; its alloc_free_loop rows are 200000 pairs each whatever ROUNDS)"
    elif ((rc != 0)); then
      verdict "$name" FAIL "exit status $rc: $(tail -n 3 "$out/bench.err" | tr '\n' ' ')"
    elif grep -q DIFFERENT "$out/bench.out"; then
      verdict "$name" FAIL "output DIFFERENT with the preload (table above)"
    else
      verdict "$name" ok "4 rows, identical output (wall times above)"
    fi
  fi

  # 5, second half: PyTorch under the preload with its own cache off, so that every tensor
  # allocation reaches cudaMalloc and cudacache. One run, with the preload: it must work.
  name="preload 5: torch, no caching"
  local torch_cuda=""
  ((torch_seconds)) && torch_cuda=$(timeout "$(limit 15)" "$interpreter" -c \
    'import torch; print(torch.version.cuda or "")' 2>/dev/null)
  if [[ ${torch_cuda%%.*} != 13 ]]; then
    verdict "$name" SKIPPED "needs a PyTorch for CUDA 13 (found '${torch_cuda:-none}')"
  else
    with_preload "$name" torch 'sum=499500.0' 100 PYTORCH_NO_CUDA_MEMORY_CACHING=1 -- \
      "$interpreter" -c 'import torch
xs = [torch.full((1 << 10,), float(i)).cuda() for i in range(1000)]
print(f"sum={sum(float(x.cpu().sum()) for x in xs) / 1024}")'
  fi
  return "$status"
}

case ${1:-} in
  build) (($# == 3)) || usage; out=$(mkdir -p "$2" && cd "$2" && pwd); build_programs "$out" "$3" ;;
  run) (($# == 4)) || usage; out=$(mkdir -p "$3" && cd "$3" && pwd); run_checks "$2" "$4" ;;
  *) usage ;;
esac
