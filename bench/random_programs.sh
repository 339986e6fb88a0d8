#!/usr/bin/env bash
# Issue #11's targets on random programs, with the rules of bench/RESULTS.md's table of targets
# (bench/variants/check_targets.py): the traces that miss one, and the count of misses per
# target. Where bench/variants.sh checks workloads someone designed, these check the policy on
# patterns nobody chose. KIND picks the programs:
#   loops      (default) bench/variants/random_programs.py: made-up training and inference loops
#              whose every shape is drawn at random;
#   lifetimes  bench/variants/random_lifetimes.py: every free takes a live block at random, so
#              no block's lifetime can be predicted (bench/POLICY.md, "Random lifetimes").
# Release build, on cudasim; about two minutes on 2 cores for the default 200 loops after the
# build, about five for 40 lifetimes programs.
#
#   bench/random_programs.sh [COUNT] [FIRST_SEED] [KIND]      (defaults: 200, 0, loops)
set -euo pipefail

count=${1:-200}
first=${2:-0}
kind=${3:-loops}
case $kind in
  loops) generator=random_programs.py ;;
  lifetimes) generator=random_lifetimes.py ;;
  *) generator= ;;
esac
if [[ ! $count =~ ^[0-9]+$ || ! $first =~ ^[0-9]+$ || $count -eq 0 || -z $generator ]]; then
  echo "usage: bench/random_programs.sh [COUNT] [FIRST_SEED] [KIND] (whole numbers, COUNT at" \
    "least 1; KIND loops or lifetimes)" >&2
  [[ -z $generator ]] && echo "random_programs.sh: unknown KIND '$kind'" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cmake --preset release >/dev/null
cmake --build --preset release --target cudacache-replay >&2

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "bench/variants/$generator" "$first" "$count" "$work/traces"
replay=build/release/tools/replay/cudacache-replay
"$replay" --min-capacity --allocators cudacache,pytorch-expandable,cub,nocache \
  --json "$work/min.json" "$work"/traces/*.csv >/dev/null
"$replay" --capacity-factor 1.02 --allocators cudacache,pytorch-expandable,cub,nocache \
  --json "$work/pressure.json" "$work"/traces/*.csv >/dev/null
echo "Random programs $first to $((first + count - 1)) (bench/variants/$generator)."
python3 bench/variants/check_targets.py "$work/min.json" "$work/pressure.json" --misses-only
