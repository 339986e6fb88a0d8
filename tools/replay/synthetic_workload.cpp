#include "synthetic_workload.h"

#include "command_line.h"

#include <charconv>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace cudacache::replay {
namespace {

constexpr std::uint64_t kParameterBytes = 4;   // fp32 master weights, gradients, moments
constexpr std::uint64_t kActivationBytes = 2;  // bf16 activations
constexpr std::uint64_t kScalarBytes = 4;      // a loss or a norm

// Emits events with ids that are never reused.
class TraceBuilder {
 public:
  std::uint64_t alloc(std::uint64_t bytes) {
    const std::uint64_t id = next_id_++;
    TraceEvent event;
    event.op = TraceOp::kAlloc;
    event.id = id;
    event.size = bytes;
    trace_.events.push_back(event);
    sizes_.push_back(bytes);
    return id;
  }
  void free(std::uint64_t id) {
    TraceEvent event;
    event.op = TraceOp::kFree;
    event.id = id;
    event.size = sizes_[id];
    trace_.events.push_back(event);
  }
  void free_all(std::vector<std::uint64_t>& ids) {
    for (std::uint64_t id : ids) free(id);
    ids.clear();
  }
  Trace take() { return std::move(trace_); }

 private:
  Trace trace_;
  std::vector<std::uint64_t> sizes_;
  std::uint64_t next_id_ = 0;
};

struct LayerTensors {
  std::vector<std::uint64_t> saved;  // activations kept for backward
};

// Element counts of one layer's parameters: fused QKV, output projection, MLP up and down,
// two layer norms (weight and bias each), biases.
std::vector<std::uint64_t> layer_parameter_elements(const TransformerShape& s) {
  const std::uint64_t h = s.hidden;
  return {3 * h * h, 3 * h, h * h, h, 4 * h * h, 4 * h, 4 * h * h, h, h, h, h, h};
}

// A synthetic workload makes about 9 + 36 x layers + steps x (34 + 90 x layers) events (counted
// on small shapes); beyond this many its trace alone takes gigabytes of host memory.
constexpr std::uint64_t kMaxSyntheticEvents = 20'000'000;

// The product of `factors`, or UINT64_MAX when it does not fit in 64 bits.
std::uint64_t saturating_product(std::initializer_list<std::uint64_t> factors) {
  std::uint64_t product = 1;
  for (std::uint64_t factor : factors) {
    if (__builtin_mul_overflow(product, factor, &product)) return UINT64_MAX;
  }
  return product;
}

// Refuses a shape whose tensors could not be simulated (or whose sizes would wrap around 2^64:
// the attention scores of the largest keys are 2^81 bytes) or whose trace would be too long.
void check_shape(const TransformerShape& s) {
  const std::pair<const char*, std::uint64_t> tensors[] = {
      {"activations (batch x seq x hidden x 2 bytes)",
       saturating_product({s.batch, s.sequence, s.hidden, kActivationBytes})},
      {"attention scores (batch x heads x seq x seq x 2 bytes)",
       saturating_product({s.batch, s.heads, s.sequence, s.sequence, kActivationBytes})},
      {"logits (batch x seq x vocab x 2 bytes)",
       saturating_product({s.batch, s.sequence, s.vocabulary, kActivationBytes})},
      {"embedding (vocab x hidden x 4 bytes)",
       saturating_product({s.vocabulary, s.hidden, kParameterBytes})},
      {"MLP weights (4 x hidden x hidden x 4 bytes)",
       saturating_product({4, s.hidden, s.hidden, kParameterBytes})},
  };
  for (const auto& [what, bytes] : tensors) {
    if (bytes > kLargestSimulatedDevice) {
      throw std::invalid_argument(std::string("synthetic: the ") + what +
                                  " would be larger than 16 TiB, the largest simulated device");
    }
  }
  // layers and steps are at most 2^20 each: no overflow here.
  const std::uint64_t events = 9 + 36 * s.layers + s.steps * (34 + 90 * s.layers);
  if (events > kMaxSyntheticEvents) {
    throw std::invalid_argument("synthetic: " + std::to_string(s.layers) + " layers and " +
                                std::to_string(s.steps) + " steps would make more than " +
                                std::to_string(kMaxSyntheticEvents) + " events; give fewer");
  }
}

}  // namespace

TransformerShape TransformerShape::parse(const std::string& spec) {
  TransformerShape shape;
  std::size_t start = 0;
  while (start < spec.size()) {
    std::size_t comma = spec.find(',', start);
    std::string entry =
        spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? spec.size() : comma + 1;
    std::size_t colon = entry.find(':');
    if (colon == std::string::npos)
      throw std::invalid_argument("synthetic: entry '" + entry + "' has no ':value'");
    const std::string key = entry.substr(0, colon);
    const std::string text = entry.substr(colon + 1);
    std::uint64_t value = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size() || value == 0 ||
        value > (1u << 20)) {
      throw std::invalid_argument("synthetic: '" + key +
                                  "' needs an integer from 1 to 1048576, got '" + text + "'");
    }
    if (key == "layers")
      shape.layers = value;
    else if (key == "hidden")
      shape.hidden = value;
    else if (key == "heads")
      shape.heads = value;
    else if (key == "seq")
      shape.sequence = value;
    else if (key == "batch")
      shape.batch = value;
    else if (key == "vocab")
      shape.vocabulary = value;
    else if (key == "steps")
      shape.steps = value;
    else
      throw std::invalid_argument("synthetic: unknown key '" + key +
                                  "' (valid: layers, hidden, heads, seq, batch, vocab, steps)");
  }
  check_shape(shape);
  return shape;
}

std::string TransformerShape::describe() const {
  return std::to_string(layers) + " layers, hidden " + std::to_string(hidden) + ", " +
         std::to_string(heads) + " heads, seq " + std::to_string(sequence) + ", batch " +
         std::to_string(batch) + ", vocab " + std::to_string(vocabulary) + ", " +
         std::to_string(steps) + " steps";
}

Trace make_transformer_training_trace(const TransformerShape& s) {
  TraceBuilder b;
  const std::uint64_t tokens = s.batch * s.sequence;
  const std::uint64_t token_bytes = tokens * s.hidden * kActivationBytes;
  const std::uint64_t attention_bytes =
      s.batch * s.heads * s.sequence * s.sequence * kActivationBytes;
  const std::uint64_t logits_bytes = tokens * s.vocabulary * kActivationBytes;

  // Parameters: embedding (tied with the output head), the layers, the final norm.
  std::vector<std::uint64_t> parameter_elements{s.vocabulary * s.hidden};
  for (std::uint64_t l = 0; l < s.layers; ++l) {
    for (std::uint64_t e : layer_parameter_elements(s)) parameter_elements.push_back(e);
  }
  parameter_elements.push_back(s.hidden);
  parameter_elements.push_back(s.hidden);
  std::vector<std::uint64_t> parameters;
  for (std::uint64_t e : parameter_elements) parameters.push_back(b.alloc(e * kParameterBytes));

  std::vector<std::uint64_t> moments;  // AdamW exp_avg and exp_avg_sq, created lazily
  for (std::uint64_t step = 0; step < s.steps; ++step) {
    const std::uint64_t input_ids = b.alloc(tokens * 8);  // int64 token ids
    const std::uint64_t labels = b.alloc(tokens * 8);

    // Forward.
    std::vector<LayerTensors> layers(s.layers);
    std::uint64_t hidden_states = b.alloc(token_bytes);  // embedding output
    std::vector<std::uint64_t> residual_stream{hidden_states};
    for (LayerTensors& layer : layers) {
      const std::uint64_t norm1 = b.alloc(token_bytes);
      const std::uint64_t qkv = b.alloc(3 * token_bytes);
      const std::uint64_t scores = b.alloc(attention_bytes);  // Q K^T, replaced by softmax
      const std::uint64_t probabilities = b.alloc(attention_bytes);
      b.free(scores);
      const std::uint64_t context = b.alloc(token_bytes);
      const std::uint64_t projected = b.alloc(token_bytes);
      const std::uint64_t after_attention = b.alloc(token_bytes);  // residual add
      b.free(projected);
      const std::uint64_t norm2 = b.alloc(token_bytes);
      const std::uint64_t up = b.alloc(4 * token_bytes);
      const std::uint64_t activated = b.alloc(4 * token_bytes);  // GELU
      const std::uint64_t down = b.alloc(token_bytes);
      hidden_states = b.alloc(token_bytes);  // residual add: the next layer's input
      b.free(down);
      layer.saved = {norm1, qkv, probabilities, context, after_attention, norm2, up, activated};
      residual_stream.push_back(hidden_states);
    }
    const std::uint64_t final_norm = b.alloc(token_bytes);
    const std::uint64_t logits = b.alloc(logits_bytes);
    const std::uint64_t log_probabilities =
        b.alloc(logits_bytes / kActivationBytes * kParameterBytes);  // fp32 loss
    const std::uint64_t loss = b.alloc(kScalarBytes);

    // Backward.
    const std::uint64_t loss_grad = b.alloc(kScalarBytes);
    std::uint64_t logits_grad = b.alloc(logits_bytes);
    b.free(log_probabilities);
    b.free(logits);
    std::uint64_t upstream = b.alloc(token_bytes);
    b.free(logits_grad);
    b.free(final_norm);
    std::vector<std::uint64_t> gradients;
    gradients.push_back(b.alloc(parameter_elements[0] * kParameterBytes));  // embedding / head
    for (std::uint64_t l = s.layers; l-- > 0;) {
      LayerTensors& layer = layers[l];
      for (std::uint64_t e : layer_parameter_elements(s))
        gradients.push_back(b.alloc(e * kParameterBytes));
      // MLP, then attention: each backward op makes a gradient temporary and drops its inputs.
      const std::uint64_t grad_activated = b.alloc(4 * token_bytes);
      const std::uint64_t grad_up = b.alloc(4 * token_bytes);
      b.free(grad_activated);
      const std::uint64_t grad_norm2 = b.alloc(token_bytes);
      b.free(grad_up);
      const std::uint64_t grad_after_attention = b.alloc(token_bytes);
      b.free(grad_norm2);
      const std::uint64_t grad_context = b.alloc(token_bytes);
      const std::uint64_t grad_probabilities = b.alloc(attention_bytes);
      const std::uint64_t grad_scores = b.alloc(attention_bytes);
      b.free(grad_probabilities);
      const std::uint64_t grad_qkv = b.alloc(3 * token_bytes);
      b.free(grad_scores);
      b.free(grad_context);
      const std::uint64_t grad_input = b.alloc(token_bytes);
      b.free(grad_qkv);
      b.free(grad_after_attention);
      b.free(upstream);
      upstream = grad_input;
      b.free_all(layer.saved);
      b.free(residual_stream.back());
      residual_stream.pop_back();
    }
    b.free(upstream);
    b.free_all(residual_stream);
    gradients.push_back(b.alloc(s.hidden * kParameterBytes));
    gradients.push_back(b.alloc(s.hidden * kParameterBytes));
    b.free(loss_grad);
    b.free(loss);
    b.free(labels);
    b.free(input_ids);

    // Clip by global norm, then AdamW.
    const std::uint64_t norm = b.alloc(kScalarBytes);
    b.free(norm);
    if (moments.empty()) {
      for (std::uint64_t e : parameter_elements) {
        moments.push_back(b.alloc(e * kParameterBytes));
        moments.push_back(b.alloc(e * kParameterBytes));
      }
    }
    for (std::uint64_t e : parameter_elements) {
      const std::uint64_t update = b.alloc(e * kParameterBytes);  // m / (sqrt(v) + eps)
      b.free(update);
    }
    b.free_all(gradients);  // zero_grad(set_to_none=True)
  }
  Trace trace = b.take();
  trace.name = "synthetic: transformer training (" + s.describe() + ")";
  finalize_trace(trace);
  return trace;
}

}  // namespace cudacache::replay
