#!/usr/bin/env bash
# Issue #11's targets on PyTorch memory snapshots of your own: every torch.cuda.memory
# snapshot pickle (`_dump_snapshot`) under a folder, such as those committed to public
# repositories, is converted to a replay trace (cudacache-replay --convert) and checked as
# bench/variants.sh checks its traces: the smallest device, held memory and calls with room,
# calls on a device of 1.02 x the peak, each against PyTorch's expandable segments and CUB
# (bench/variants/check_targets.py, the rules of bench/RESULTS.md), then the smallest device and
# the 1.02 x device again with cudaMalloc's memory in 2 MiB pages (CUDASIM_MALLOC_PAGE=2MiB).
# Where the real traces of ../shared/traces are those the policy was tuned on, these are
# workloads it has not seen. Release build, on cudasim; a minute or two per ten snapshots of
# a few GiB on 2 cores.
#
#   bench/snapshots.sh DIR      (every *.pickle and *.pkl under DIR)
#
# A snapshot that does not convert is named with the converter's error and left out, as is
# one with no allocation in it and one whose trace is the same as an earlier one's (the same
# recording committed twice). A trace is named by the snapshot's path under DIR, / as __ and
# without its extension (-2, -3, ... where two paths give one name). CUDACACHE_REPLAY names a built cudacache-replay; without it the
# Release build's is built first.
set -euo pipefail

if [[ $# -ne 1 || ! -d $1 ]]; then
  echo "usage: bench/snapshots.sh DIR (a folder of PyTorch memory snapshot pickles)" >&2
  exit 2
fi
snapshots=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
replay=${CUDACACHE_REPLAY:-}
if [[ -z $replay ]]; then
  cmake --preset release >/dev/null
  cmake --build --preset release --target cudacache-replay >&2
  replay=build/release/tools/replay/cudacache-replay
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/traces"
converted=0
while IFS= read -r -d '' pickle; do
  relative=${pickle#"$snapshots"/}
  name=${relative%.*}
  name=${name//\//__}
  # x.pkl beside x.pickle (or a/b.pickle beside a__b.pickle): the second gets a number.
  trace=$work/traces/$name.csv
  n=1
  while [[ -e $trace ]]; do
    n=$((n + 1))
    trace=$work/traces/$name-$n.csv
  done
  if ! "$replay" --convert "$pickle" -o "$trace" >/dev/null 2>"$work/error"; then
    echo "snapshots.sh: not converted: $relative: $(tail -n 1 "$work/error")" >&2
    rm -f "$trace"
    continue
  fi
  if ! grep -q '^alloc,' "$trace"; then
    echo "snapshots.sh: left out: $relative: no allocation in its trace" >&2
    rm -f "$trace"
    continue
  fi
  for earlier in "$work"/traces/*.csv; do
    if [[ $earlier != "$trace" ]] && cmp -s "$earlier" "$trace"; then
      echo "snapshots.sh: left out: $relative: the same trace as $(basename "$earlier" .csv)" >&2
      rm -f "$trace"
      continue 2
    fi
  done
  converted=$((converted + 1))
done < <(find "$snapshots" -type f \( -name '*.pickle' -o -name '*.pkl' \) -print0 | sort -z)
if [[ $converted -eq 0 ]]; then
  echo "snapshots.sh: no snapshot under '$snapshots' converted to a trace" >&2
  exit 1
fi

allocators=cudacache,pytorch-expandable,cub,nocache
"$replay" --min-capacity --allocators "$allocators" \
  --json "$work/min.json" "$work"/traces/*.csv >/dev/null
"$replay" --capacity-factor 1.02 --allocators "$allocators" \
  --json "$work/pressure.json" "$work"/traces/*.csv >/dev/null
CUDASIM_MALLOC_PAGE=2MiB "$replay" --min-capacity --allocators "$allocators" \
  --json "$work/pages-min.json" "$work"/traces/*.csv >/dev/null
CUDASIM_MALLOC_PAGE=2MiB "$replay" --capacity-factor 1.02 --allocators "$allocators" \
  --json "$work/pages-pressure.json" "$work"/traces/*.csv >/dev/null
echo "$converted snapshots under $1 (bench/snapshots.sh)."
python3 bench/variants/check_targets.py "$work/min.json" "$work/pressure.json" \
  --pages "$work/pages-min.json" "$work/pages-pressure.json"
