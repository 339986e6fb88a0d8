#!/usr/bin/env bash
# Counts the instructions each allocator executes per event of a replay, its device calls left
# out: the allocators' own CPU work, measured without the noise of a shared machine (the same
# binary and trace give the same count, whatever else runs). A companion to bench_replay's
# allocator ns / event, which is wall-clock time and moves with the machine's load.
#
#   bench/instructions.sh [TRACES_DIR] [ALLOCATORS] [CAPACITY]
#   (defaults: ../shared/traces, cudacache,pytorch,pytorch-expandable, 48GiB)
#
# Each trace is replayed once per allocator by the Release build's cudacache-replay under
# valgrind's callgrind, counting only inside DeviceAllocator::allocate and ::deallocate; the
# instructions under the device-call wrappers that cudasim times (vmm_api's create, release,
# map, unmap, set_access, reserve and address_free, device_api's malloc_memory, free_memory,
# synchronize and synchronize_stream) are subtracted, as bench_replay subtracts their time.
# The device is CAPACITY for every trace, not bench_replay's 80 GiB: valgrind gives a program
# about 128 GiB of address space, and each expandable range reserves 1 1/8 x the device. On a
# device smaller than 8 x a trace's peak the policies may place and call differently than on
# bench_replay's, so compare allocators within one run of this script, not with bench_replay.
# About a minute for the 11 real traces and three allocators on 2 cores.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
traces=${1:-$root/../shared/traces}
allocators=${2:-cudacache,pytorch,pytorch-expandable}
capacity=${3:-48GiB}
build=$root/build/release
replay=$build/tools/replay/cudacache-replay
if ! command -v valgrind >/dev/null || ! command -v callgrind_annotate >/dev/null; then
  echo "instructions.sh: valgrind (callgrind) is missing: apt-get install valgrind" >&2
  exit 1
fi
if [[ ! -x $replay ]]; then
  echo "instructions.sh: $replay is missing: cmake --workflow --preset demo builds it" >&2
  exit 1
fi
if ! compgen -G "$traces/*.csv" >/dev/null; then
  echo "instructions.sh: no trace (*.csv) in '$traces'" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

printf '| trace | events |'
IFS=, read -r -a names <<<"$allocators"
for name in "${names[@]}"; do printf ' %s |' "$name"; done
printf ' %s / %s |\n|---|---:|' "${names[0]}" "${names[1]:-${names[0]}}"
for _ in "${names[@]}"; do printf -- '---:|'; done
printf -- '---:|\n'
for trace in "$traces"/*.csv; do
  counts=()
  for name in "${names[@]}"; do
    out=$work/callgrind.out
    # cudacache-replay switches itself to cudasim by re-executing; under valgrind it must start
    # on cudasim instead (the marker tells it it is already there).
    if ! CUDACACHE_REPLAY_REEXECUTED=1 LD_LIBRARY_PATH="$build/tools/cudasim" \
      valgrind --tool=callgrind --collect-atstart=no \
      --toggle-collect='cudacache::DeviceAllocator::allocate(*' \
      --toggle-collect='cudacache::DeviceAllocator::deallocate(*' \
      --callgrind-out-file="$out" "$replay" --allocators "$name" --capacity "$capacity" \
      --json "$work/replay.json" "$trace" >"$work/log" 2>&1; then
      echo "instructions.sh: $(basename "$trace") / $name failed:" >&2
      tail -n 5 "$work/log" >&2
      exit 1
    fi
    counts+=("$(callgrind_annotate --inclusive=yes --threshold=100 "$out" |
      python3 "$root/bench/replay/instructions_per_event.py" "$work/replay.json")")
  done
  events=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["traces"][0]["events"])' \
    "$work/replay.json")
  printf '| `%s` | %s |' "$(basename "$trace" .csv)" "$events"
  for count in "${counts[@]}"; do printf ' %s |' "$count"; done
  python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); print(f" {a / b:.2f} |")' \
    "${counts[0]}" "${counts[1]:-${counts[0]}}"
done
