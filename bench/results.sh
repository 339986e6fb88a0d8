#!/usr/bin/env bash
# Regenerates bench/RESULTS.md: memory and device-call figures (calls by kind and their
# estimated cost on a GPU) of every allocator on every real trace (cudacache-replay
# --min-capacity --json), the same on a device of 1.02 x each trace's peak (--capacity-factor:
# who completes, at what cost in calls), what they hold and call on devices of 1.2, 2 and 4 x
# the peak, and their time per event (bench_replay: the in-process
# allocators, pytorch-expandable included), all from a Release build on cudasim, merged into
# Markdown by bench/replay/write_results.py; last, the smallest device and the 1.02 x device
# again with cudaMalloc's memory in 2 MiB pages (CUDASIM_MALLOC_PAGE=2MiB).
# When PyTorch is importable (`python3 -c "import torch"`, or $CUDACACHE_PYTHON), the replay also
# runs PyTorch's own allocator on cudasim (torch-native, torch-expandable: replayed from Python,
# so memory and device calls only; bench_replay does not time them). About 3 minutes
# on 2 cores after the build without PyTorch (bench_replay: about 2), about 5 with it.
#
#   bench/results.sh [TRACES_DIR]      (default: ../shared/traces next to the project)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
traces=${1:-$root/../shared/traces}
if [[ ! -d $traces ]]; then
  echo "results.sh: traces folder '$traces' not found (pass it as the first argument)" >&2
  exit 2
fi
traces=$(cd "$traces" && pwd)
cd "$root"
# RESULTS.md's figures charge a cudaMalloc its size in 256-byte units, cudasim's default (its
# last table sets them beside those with CUDASIM_MALLOC_PAGE=2MiB).
if [[ -n ${CUDASIM_MALLOC_PAGE:-} ]]; then
  echo "results.sh: CUDASIM_MALLOC_PAGE is set; RESULTS.md is written with cudasim's default" \
    "(unset it, or run cudacache-replay with it by hand)" >&2
  exit 2
fi

allocators=cudacache,pytorch,pytorch-expandable,cub,nocache
targets=(cudacache-replay bench_replay)
torch_missing=()
python=${CUDACACHE_PYTHON:-python3}
if "$python" -c "import torch" >/dev/null 2>&1; then
  allocators=cudacache,pytorch,pytorch-expandable,torch-native,torch-expandable,cub,nocache
  # torch_replay.py preloads cudasim's driver and NVML libraries next to libcudart.so.13.
  targets+=(cudasim_driver cudasim_nvml)
else
  torch_missing=(--torch-missing "\`$python -c \"import torch\"\` failed on this machine")
  echo "results.sh: $python cannot import torch; leaving out torch-native and torch-expandable" >&2
fi

cmake --preset release >/dev/null
cmake --build --preset release --target "${targets[@]}"

# The table under pressure: every trace on a device just above its peak of requested bytes.
pressure_factor=1.02
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "results.sh: cudacache-replay --min-capacity --allocators $allocators on $traces" >&2
build/release/tools/replay/cudacache-replay --min-capacity --allocators "$allocators" \
  --json "$work/replay.json" "$traces"/*.csv >/dev/null

echo "results.sh: cudacache-replay --capacity-factor $pressure_factor (under pressure)" >&2
build/release/tools/replay/cudacache-replay --capacity-factor "$pressure_factor" \
  --allocators "$allocators" --json "$work/pressure.json" "$traces"/*.csv >/dev/null

# The same two with cudaMalloc's memory in 2 MiB pages (README, "cudasim"): what CUB and nocache
# need if the driver works as PyTorch's pull request 17120 describes it.
echo "results.sh: the same two with CUDASIM_MALLOC_PAGE=2MiB" >&2
paged_allocators=cudacache,pytorch,pytorch-expandable,cub,nocache
CUDASIM_MALLOC_PAGE=2MiB build/release/tools/replay/cudacache-replay --min-capacity \
  --allocators "$paged_allocators" --json "$work/pages.json" "$traces"/*.csv >/dev/null
CUDASIM_MALLOC_PAGE=2MiB build/release/tools/replay/cudacache-replay \
  --capacity-factor "$pressure_factor" --allocators "$paged_allocators" \
  --json "$work/pages-pressure.json" "$traces"/*.csv >/dev/null

# Held memory and calls on devices of a few sizes between the two (the in-process allocators:
# torch-native and torch-expandable equal pytorch and pytorch-expandable call for call).
sized=()
for factor in 1.2 2 4; do
  echo "results.sh: cudacache-replay --capacity-factor $factor (by device size)" >&2
  build/release/tools/replay/cudacache-replay --capacity-factor "$factor" \
    --allocators cudacache,pytorch,pytorch-expandable,cub \
    --json "$work/sized-$factor.json" "$traces"/*.csv >/dev/null
  sized+=(--sized-json "$factor=$work/sized-$factor.json")
done

# Ten repetitions of every run, interleaved at random, of which write_results.py keeps the least
# time per event: on a shared machine, load only adds time, and a trace's ratio to PyTorch's
# policy moved by up to 40 % between two runs of the same binary (medians of five). Ten of 0.1 s
# take as long as five of 0.2 s (the count until 2026-12-06), and the least of ten is likelier
# to come from a quiet stretch (on 2026-12-06 runs of three of one binary gave `qwen7b` 1.12 to
# 1.69 x the native policy's time).
echo "results.sh: bench_replay" >&2
build/release/bench/replay/bench_replay --traces="$traces" \
  --allocators=cudacache,pytorch,pytorch-expandable,cub,nocache --benchmark_min_time=0.1 \
  --benchmark_repetitions=10 --benchmark_enable_random_interleaving=true \
  --benchmark_out_format=json --benchmark_out="$work/bench.json" >&2

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
python3 bench/replay/write_results.py \
  --replay-json "$work/replay.json" --bench-json "$work/bench.json" --traces "$traces" \
  --command "bench/results.sh" --date "$(date -u '+%Y-%m-%d %H:%M UTC')" \
  --machine "$cpu, $(nproc) cores (nproc)" "${torch_missing[@]}" \
  --pressure-json "$work/pressure.json" --pressure-factor "$pressure_factor" "${sized[@]}" \
  --pages-json "$work/pages.json" "$work/pages-pressure.json" \
  --previous bench/RESULTS.md >"$work/RESULTS.md"
mv "$work/RESULTS.md" bench/RESULTS.md
echo "results.sh: wrote bench/RESULTS.md" >&2
