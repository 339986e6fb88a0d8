#!/usr/bin/env bash
# Issue #11's targets on traces the policy was not tuned on (bench/variants/make_variants.py:
# the real traces scaled, run one after another, interleaved on two streams, torch.cat KV
# caches, dynamic shapes in serving and training, continuous batching, a mixture of experts, a
# CNN on images of random resolution, fully sharded data-parallel training and training with
# activation checkpointing), with the same rules as bench/RESULTS.md's table of targets, and how
# it compares with PyTorch's expandable segments on a device of twice the peak, and the targets
# again with cudaMalloc's memory in 2 MiB pages (CUDASIM_MALLOC_PAGE=2MiB). Release build, on
# cudasim; about two minutes on 2 cores after the build.
#
#   bench/variants.sh [TRACES_DIR]      (default: ../shared/traces next to the project)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
traces=${1:-$root/../shared/traces}
if [[ ! -d $traces ]]; then
  echo "variants.sh: traces folder '$traces' not found (pass it as the first argument)" >&2
  exit 2
fi
traces=$(cd "$traces" && pwd)  # the script works from the project's root
cd "$root"
cmake --preset release >/dev/null
cmake --build --preset release --target cudacache-replay >&2

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 bench/variants/make_variants.py "$traces" "$work/traces" >/dev/null
replay=build/release/tools/replay/cudacache-replay
"$replay" --min-capacity --allocators cudacache,pytorch-expandable,cub,nocache \
  --json "$work/min.json" "$work"/traces/*.csv >/dev/null
"$replay" --capacity-factor 1.02 --allocators cudacache,pytorch,pytorch-expandable,cub,nocache \
  --json "$work/pressure.json" "$work"/traces/*.csv >/dev/null
"$replay" --capacity-factor 2 --allocators cudacache,pytorch-expandable \
  --json "$work/twice.json" "$work"/traces/*.csv >/dev/null
# The first two again with cudaMalloc's memory in 2 MiB pages (README, "cudasim"): what CUB and
# nocache need if the driver works as PyTorch's pull request 17120 describes it.
CUDASIM_MALLOC_PAGE=2MiB "$replay" --min-capacity \
  --allocators cudacache,pytorch-expandable,cub,nocache \
  --json "$work/pages-min.json" "$work"/traces/*.csv >/dev/null
CUDASIM_MALLOC_PAGE=2MiB "$replay" --capacity-factor 1.02 \
  --allocators cudacache,pytorch,pytorch-expandable,cub,nocache \
  --json "$work/pages-pressure.json" "$work"/traces/*.csv >/dev/null
python3 bench/variants/check_targets.py "$work/min.json" "$work/pressure.json" "$work/twice.json" \
  --pages "$work/pages-min.json" "$work/pages-pressure.json"
