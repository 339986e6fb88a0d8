#!/usr/bin/env bash
# Regenerates bench/RESULTS.md: memory and device-call figures of every allocator on every real
# trace (cudacache-replay --min-capacity --json) and their time per event (bench_replay), both
# from a Release build on cudasim, merged into Markdown by bench/replay/write_results.py.
# About a minute on 2 cores after the build.
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

cmake --preset release >/dev/null
cmake --build --preset release --target cudacache-replay bench_replay

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "results.sh: cudacache-replay --min-capacity on $traces" >&2
build/release/tools/replay/cudacache-replay --min-capacity --json "$work/replay.json" \
  "$traces"/*.csv >/dev/null

echo "results.sh: bench_replay" >&2
build/release/bench/replay/bench_replay --traces="$traces" --benchmark_min_time=0.2 \
  --benchmark_repetitions=1 --benchmark_out_format=json \
  --benchmark_out="$work/bench.json" >&2

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
python3 bench/replay/write_results.py \
  --replay-json "$work/replay.json" --bench-json "$work/bench.json" --traces "$traces" \
  --command "bench/results.sh" --date "$(date -u '+%Y-%m-%d %H:%M UTC')" \
  --machine "$cpu, $(nproc) cores (nproc)" \
  --previous bench/RESULTS.md >"$work/RESULTS.md"
mv "$work/RESULTS.md" bench/RESULTS.md
echo "results.sh: wrote bench/RESULTS.md" >&2
