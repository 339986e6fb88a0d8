// A built-in workload for runs without a trace: the allocation pattern of a GPT-style
// transformer's training loop (mixed precision, AdamW), generated from a few parameters.
#pragma once

#include <cstdint>
#include <string>

#include "trace.h"

namespace cudacache::replay {

struct TransformerShape {
  std::uint64_t layers = 12;
  std::uint64_t hidden = 768;
  std::uint64_t heads = 12;
  std::uint64_t sequence = 512;
  std::uint64_t batch = 8;
  std::uint64_t vocabulary = 32000;
  std::uint64_t steps = 3;

  // "layers:12,hidden:768,..." (any subset of the keys above); throws std::invalid_argument.
  static TransformerShape parse(const std::string& spec);
  std::string describe() const;  // "12 layers, hidden 768, ..."
};

// Per step: forward (activations kept for backward, attention temporaries freed at once),
// loss, backward (activation gradients as temporaries, saved activations released layer by
// layer, parameter gradients), AdamW update (moment buffers created on the first step,
// per-parameter temporaries), then zero_grad(set_to_none) frees the gradients. Parameters
// and moments are fp32, activations bf16. Named "synthetic: transformer training (...)".
Trace make_transformer_training_trace(const TransformerShape& shape);

}  // namespace cudacache::replay
