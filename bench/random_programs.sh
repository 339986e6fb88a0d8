#!/usr/bin/env bash
# Issue #11's targets on random programs (bench/variants/random_programs.py: made-up training and
# inference loops whose every shape is drawn at random), with the rules of bench/RESULTS.md's
# table of targets (bench/variants/check_targets.py): the traces that miss one, and the count of
# misses per target. Where bench/variants.sh checks workloads someone designed, these check the
# policy on patterns nobody chose. Release build, on cudasim; about two minutes on 2 cores for
# the default 200 programs after the build.
#
#   bench/random_programs.sh [COUNT] [FIRST_SEED]      (defaults: 200, 0)
set -euo pipefail

count=${1:-200}
first=${2:-0}
if [[ ! $count =~ ^[0-9]+$ || ! $first =~ ^[0-9]+$ || $count -eq 0 ]]; then
  echo "usage: bench/random_programs.sh [COUNT] [FIRST_SEED] (whole numbers, COUNT at least 1)" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cmake --preset release >/dev/null
cmake --build --preset release --target cudacache-replay >&2

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 bench/variants/random_programs.py "$first" "$count" "$work/traces"
replay=build/release/tools/replay/cudacache-replay
"$replay" --min-capacity --allocators cudacache,pytorch-expandable,cub,nocache \
  --json "$work/min.json" "$work"/traces/*.csv >/dev/null
"$replay" --capacity-factor 1.02 --allocators cudacache,pytorch-expandable,cub,nocache \
  --json "$work/pressure.json" "$work"/traces/*.csv >/dev/null
echo "Random programs $first to $((first + count - 1)) (bench/variants/random_programs.py)."
python3 bench/variants/check_targets.py "$work/min.json" "$work/pressure.json" --misses-only
