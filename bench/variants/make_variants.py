#!/usr/bin/env python3
"""Traces that cudacache's policy was not tuned on, made from the real ones.

The policy's constants were measured on the traces in ../shared/traces; it is also judged on
real traces nobody here has seen. These variants change what makes memory fragment while
keeping real allocation patterns: the sizes scaled (another model size, so every device-size
threshold is crossed elsewhere), two workloads one after the other in one process (a phase
change, the first one's live blocks kept), two interleaved on two streams (two models served
side by side), a KV cache grown by torch.cat at every decode step, alone and with each
step's scores kept until the request ends, an encoder serving requests of random shapes
(dynamic shapes: a request's blocks rarely have the sizes of the last one's), and a decoder
trained on batches of random sequence length (dynamic shapes in training: each step's
activations and gradients interleaved in new sizes); since 2026-12-06 also a server decoding
several requests at once with torch.cat KV caches (continuous batching without paged
attention: caches of requests that start and end at random times), a mixture-of-experts model
trained with random routing (each expert's buffers a new size every step, kept for the
backward) and a CNN serving images of random resolution; since 2026-12-06 22:05 UTC also one
rank of fully sharded data-parallel training (FSDP: each layer's parameters gathered into a
large buffer on a second stream before it runs, in the forward and again in the backward) and
training with activation checkpointing (each layer's activations made twice a step).
Deterministic.

    bench/variants/make_variants.py TRACES_DIR OUT_DIR
"""

import csv
import pathlib
import random
import sys

# (trace, factor): factors chosen to move each device across page-size thresholds.
SCALED = (("bert_large_inference", 2.7), ("decomfl_zo_federated_opt_finetune", 3.3),
          ("cs336_small_ctx128_bs1_train_step", 0.45), ("gcn_codegraph_train_gpu0", 0.3),
          ("qwen7b_layerwise_sparse_quant_calibration", 1.7), ("nca3d_inference_cholec", 0.21),
          ("cs336_medium_ctx512_train_step", 1.6), ("eor_latent_cnn_counterfactuals", 9.0))
CONCATENATED = (("decomfl_zo_federated_opt_finetune", "bert_large_inference"),
                ("cs336_small_ctx128_bs1_train_step", "gcn_codegraph_train_gpu0"))
INTERLEAVED = (("bert_large_inference", "decomfl_zo_federated_opt_finetune", 1),
               ("cs336_small_ctx128_bs1_train_step", "eor_latent_cnn_counterfactuals", 2))


def short(name):
    """cs336_small_ctx128... -> cs336_small, bert_large_inference -> bert."""
    parts = name.split("_")
    return "_".join(parts[:2]) if parts[0] == "cs336" else parts[0]


def load(path):
    with open(path, newline="") as f:
        reader = csv.reader(f)
        if next(reader) != ["op", "id", "size", "stream"]:
            raise ValueError(f"{path}: header is not op,id,size,stream")
        return [(op, int(i), int(size), int(stream)) for op, i, size, stream in reader]


def save(path, rows):
    with open(path, "w") as f:
        f.write("op,id,size,stream\n")
        f.writelines(f"{op},{i},{size},{stream}\n" for op, i, size, stream in rows)


def scaled(rows, factor):
    """Every size times `factor` (at least 1 byte); a free repeats its alloc's new size."""
    return [(op, i, max(1, int(size * factor)), stream) for op, i, size, stream in rows]


def renumbered(first, second):
    """`second`'s ids moved past `first`'s and its streams after `first`'s."""
    id_offset = max((i for _, i, _, _ in first), default=-1) + 1
    stream_offset = max((s for _, _, _, s in first), default=-1) + 1
    return [(op, i + id_offset, size, stream + stream_offset) for op, i, size, stream in second]


def concatenated(first, second):
    """`first`, then `second` on the same streams: what `first` left live stays live."""
    id_offset = max((i for _, i, _, _ in first), default=-1) + 1
    return first + [(op, i + id_offset, size, stream) for op, i, size, stream in second]


def interleaved(first, second, seed):
    """Both at once, `second` on its own streams, each keeping its order, mixed at random in
    proportion to their lengths."""
    second = renumbered(first, second)
    rnd = random.Random(seed)
    rows, a, b = [], 0, 0
    while a < len(first) or b < len(second):
        take_first = b >= len(second) or (
            a < len(first) and rnd.random() < len(first) / (len(first) + len(second)))
        if take_first:
            rows.append(first[a])
            a += 1
        else:
            rows.append(second[b])
            b += 1
    return rows


class MadeUpTrace:
    """The rows of a trace written here: alloc() returns a block (its id, size and stream, 0
    unless given), free() frees blocks."""

    def __init__(self):
        self.rows = []
        self.next_id = 0

    def alloc(self, size, stream=0):
        block = (self.next_id, size, stream)
        self.rows.append(("alloc", self.next_id, size, stream))
        self.next_id += 1
        return block

    def free(self, *blocks):
        for ident, size, stream in blocks:
            self.rows.append(("free", ident, size, stream))

    def adamw_step(self, params, states, group):
        """AdamW's step over `params`: its two states per parameter made at the first step
        (`states` None), then a temporary per parameter, `group` of them at a time (PyTorch's
        foreach ops); returns the states."""
        if states is None:
            states = [(self.alloc(p[1]), self.alloc(p[1])) for p in params]
        for first in range(0, len(params), group):
            self.free(*[self.alloc(p[1]) for p in params[first:first + group]])
        return states

    def free_trained(self, states, params):
        """The end of training: the optimizer's states (pairs), then the parameters."""
        for state in states:
            self.free(*state)
        self.free(*params)


def kv_cache_decode(layers=24, steps=400, requests=3, token_bytes=2 * 4096 * 2 * 8, prompt=128,
                    kept_scores=0):
    """A decode loop that grows each layer's KV cache by one token with torch.cat: the new cache
    is allocated before the old one is freed, beside a small temporary; a logits buffer per
    step; the caches dropped after each request; weights live throughout. With `kept_scores`,
    each step also keeps that many bytes of scores until its request ends (Hugging Face's
    generate(output_scores=True)), allocated while the step's logits are live."""
    trace = MadeUpTrace()
    alloc, free = trace.alloc, trace.free

    weights = [alloc(50 << 20) for _ in range(layers)]
    for _ in range(requests):
        caches = [alloc(prompt * token_bytes) for _ in range(layers)]
        scores = []
        for step in range(1, steps + 1):
            for layer in range(layers):
                temporary = alloc(4096 * 2 * 8)
                grown = alloc((prompt + step) * token_bytes)
                free(caches[layer])
                caches[layer] = grown
                free(temporary)
            logits = alloc(32000 * 2 * 8)
            if kept_scores:
                scores.append(alloc(kept_scores))
            free(logits)
        for cache in caches:
            free(cache)
        for kept in scores:
            free(kept)
    for weight in weights:
        free(weight)
    return trace.rows


def variable_length_inference(layers=24, hidden=1024, heads=16, vocab=30522, requests=200, seed=3):
    """A BERT-large-like encoder serving requests of random shape (batch 1-32, 16-512 tokens), one
    after another, in half precision: every activation's size follows the request's tokens, the
    attention scores' their square, so that a request's blocks rarely have the sizes of the
    last one's. Weights live throughout; each layer frees its temporaries as soon as an
    inference forward no longer needs them, and the output is freed once copied to the host."""
    trace = MadeUpTrace()
    alloc, free = trace.alloc, trace.free
    rnd = random.Random(seed)

    weights = [alloc(vocab * hidden * 2)]
    for _ in range(layers):
        weights += [alloc(3 * hidden * hidden * 2), alloc(hidden * hidden * 2),
                    alloc(4 * hidden * hidden * 2), alloc(4 * hidden * hidden * 2)]
    for _ in range(requests):
        batch, tokens = rnd.randint(1, 32), rnd.randint(16, 512)
        act = batch * tokens * hidden * 2
        ids = alloc(batch * tokens * 8)
        x = alloc(act)
        free(ids)
        for _ in range(layers):
            qkv = alloc(3 * act)
            scores = alloc(batch * heads * tokens * tokens * 2)
            probs = alloc(batch * heads * tokens * tokens * 2)
            free(scores)
            context = alloc(act)
            free(probs, qkv)
            attention = alloc(act)
            free(context)
            normed = alloc(act)
            free(attention, x)
            up = alloc(4 * act)
            activated = alloc(4 * act)
            free(up)
            down = alloc(act)
            free(activated)
            x = alloc(act)
            free(down, normed)
        pooled = alloc(batch * hidden * 2)
        free(x, pooled)
    free(*weights)
    return trace.rows


def variable_length_training(layers=12, hidden=768, heads=12, vocab=50257, batch=4, steps=30,
                             tokens=(64, 512), seed=9):
    """A GPT-2-small-like decoder trained with mixed precision on batches of random sequence
    length (64-512 tokens, as without padding to a fixed length): every step's activations have
    new sizes, the attention's the square of its length. The forward keeps what the backward
    needs and the bfloat16 copies of the weights autocast makes (freed when the forward ends);
    the backward frees those in reverse and allocates each parameter's gradient when it reaches
    it, among the activations it frees; AdamW's states are made at the first step, its foreach
    temporaries at every step, and the gradients are freed before the next step
    (zero_grad(set_to_none=True), PyTorch's default)."""
    trace = MadeUpTrace()
    alloc, free = trace.alloc, trace.free
    rnd = random.Random(seed)

    # float32 parameters: the embedding (tied with the output), then per layer the attention's
    # and the MLP's matrices, their biases and two layer norms (weight and bias each).
    per_layer = [3 * hidden * hidden, hidden * hidden, 4 * hidden * hidden, 4 * hidden * hidden,
                 3 * hidden, hidden, 4 * hidden, hidden, hidden, hidden, hidden, hidden]
    params = [alloc(4 * vocab * hidden)]
    for _ in range(layers):
        params += [alloc(4 * n) for n in per_layer]
    grads = [None] * len(params)
    adam = None

    def grad(*indices):
        for index in indices:
            if grads[index] is None:
                grads[index] = alloc(params[index][1])

    for _ in range(steps):
        seq = rnd.randint(*tokens)
        tok = batch * seq
        act = tok * hidden * 2  # bfloat16
        square = batch * heads * seq * seq * 2
        ids, labels = alloc(tok * 8), alloc(tok * 8)
        copies = []  # autocast's bfloat16 weights
        x = alloc(act)
        saved = []
        for _ in range(layers):
            ln1, stats1 = alloc(act), alloc(tok * 8)
            copies.append(alloc(3 * hidden * hidden * 2))
            qkv = alloc(3 * act)
            scores = alloc(square)
            probs = alloc(square)
            free(scores)
            context = alloc(act)
            copies.append(alloc(hidden * hidden * 2))
            attention = alloc(act)
            x2 = alloc(act)
            ln2, stats2 = alloc(act), alloc(tok * 8)
            copies.append(alloc(4 * hidden * hidden * 2))
            up = alloc(4 * act)
            gelu = alloc(4 * act)
            copies.append(alloc(4 * hidden * hidden * 2))
            down = alloc(act)
            free(attention)
            x3 = alloc(act)
            free(down)
            saved.append((ln1, stats1, qkv, probs, context, x2, ln2, stats2, up, gelu, x))
            x = x3
        final_norm = alloc(act)
        copies.append(alloc(vocab * hidden * 2))
        logits = alloc(tok * vocab * 2)
        free(*copies)  # the autocast region ends
        logits32, logsumexp, loss = alloc(tok * vocab * 4), alloc(tok * 4), alloc(4)
        grad_logits32 = alloc(tok * vocab * 4)
        free(logits32, logsumexp)
        grad_logits = alloc(tok * vocab * 2)
        free(grad_logits32)
        grad(0)
        grad_x = alloc(act)
        free(grad_logits, logits, final_norm, x)  # the final norm's input too
        for layer in reversed(range(layers)):
            base = 1 + layer * len(per_layer)
            ln1, stats1, qkv, probs, context, x2, ln2, stats2, up, gelu, x_in = saved.pop()
            grad_gelu = alloc(4 * act)
            grad(base + 3, base + 7)
            grad_up = alloc(4 * act)
            free(grad_gelu, gelu)
            grad(base + 2, base + 6)
            grad_ln2 = alloc(act)
            free(grad_up, up)
            grad_x2 = alloc(act)
            free(grad_ln2, ln2, stats2)
            grad(base + 9, base + 10)
            grad_context = alloc(act)
            grad(base + 1, base + 5)
            grad_probs = alloc(square)
            grad_scores = alloc(square)
            free(grad_probs, probs)
            grad_qkv = alloc(3 * act)
            free(grad_scores, grad_context, context)
            grad(base, base + 4)
            grad_ln1 = alloc(act)
            free(grad_qkv, qkv)
            grad_in = alloc(act)
            free(grad_ln1, ln1, stats1, grad_x, grad_x2, x2, x_in)
            grad(base + 8, base + 11)
            grad_x = grad_in
        free(grad_x, ids, labels, loss)
        adam = trace.adamw_step(params, adam, 24)
        free(*grads)
        grads = [None] * len(params)
    trace.free_trained(adam, params)
    return trace.rows


def continuous_batching(layers=16, hidden=2048, vocab=32000, slots=8, steps=500,
                        prompt=(32, 1024), output=(8, 300), seed=5):
    """A server decoding up to `slots` requests at once in half precision, its KV caches grown by
    torch.cat (no paged attention): every step, each request's cache of each layer is replaced
    by one a token longer; a request ends after a random number of tokens and a new one, with a
    prompt of random length, takes its slot, so caches of every age and size sit side by side
    and are freed out of order."""
    trace = MadeUpTrace()
    alloc, free = trace.alloc, trace.free
    rnd = random.Random(seed)
    token = 2 * hidden * 2  # a key and a value per layer
    weights = [alloc(12 * hidden * hidden * 2) for _ in range(layers)]
    embedding = alloc(vocab * hidden * 2)
    active = []  # [caches, tokens so far, tokens left]

    def admit():
        length = rnd.randint(*prompt)
        activations = alloc(length * hidden * 2)
        caches = [alloc(length * token) for _ in range(layers)]
        scratch = alloc(length * 4 * hidden * 2)
        free(scratch, activations)
        return [caches, length, rnd.randint(*output)]

    for _ in range(steps):
        while len(active) < slots:
            active.append(admit())
        batch = len(active)
        x = alloc(batch * hidden * 2)
        for layer in range(layers):
            query = alloc(batch * hidden * 2)
            for request in active:
                grown = alloc((request[1] + 1) * token)
                free(request[0][layer])
                request[0][layer] = grown
            attention, mlp = alloc(batch * hidden * 2), alloc(batch * 4 * hidden * 2)
            free(query, attention)
            out = alloc(batch * hidden * 2)
            free(mlp, x)
            x = out
        logits = alloc(batch * vocab * 4)
        free(logits, x)
        for request in active:
            request[1] += 1
            request[2] -= 1
        for request in [r for r in active if r[2] <= 0]:
            free(*request[0])
            active.remove(request)
    for request in active:
        free(*request[0])
    free(embedding, *weights)
    return trace.rows


def moe_training(layers=8, hidden=1024, experts=8, ffn=4096, tokens=8192, vocab=32000, steps=20,
                 seed=11):
    """A mixture-of-experts transformer trained in mixed precision: each layer routes the step's
    tokens to its experts at random (skewed), so every expert's input, hidden and activation
    buffers have a new size every step; the forward keeps them for the backward, which frees
    them expert by expert beside each expert's gradient; AdamW's states come after the first
    step and the gradients are freed before the next."""
    trace = MadeUpTrace()
    alloc, free = trace.alloc, trace.free
    rnd = random.Random(seed)
    attention_params, expert_params = 4 * hidden * hidden * 4, 2 * hidden * ffn * 4
    params = []
    for _ in range(layers):
        params += [alloc(attention_params)] + [alloc(expert_params) for _ in range(experts)]
    adam = None
    for _ in range(steps):
        x = alloc(tokens * hidden * 2)
        saved = []
        for _ in range(layers):
            qkv, attention = alloc(3 * tokens * hidden * 2), alloc(tokens * hidden * 2)
            router = alloc(tokens * experts * 4)
            weights = [rnd.random() ** 2 for _ in range(experts)]
            counts = [int(tokens * w / sum(weights)) + 1 for w in weights]
            kept = []
            for count in counts:
                expert_in, hidden_act = alloc(count * hidden * 2), alloc(count * ffn * 2)
                activated, expert_out = alloc(count * ffn * 2), alloc(count * hidden * 2)
                kept.append((expert_in, hidden_act, activated))
                free(expert_out)
            y = alloc(tokens * hidden * 2)
            saved.append((qkv, attention, router, kept, x))
            x = y
        logits = alloc(tokens * vocab * 2)
        free(logits)
        grads = []
        grad = alloc(tokens * hidden * 2)
        for _ in range(layers):
            qkv, attention, router, kept, x_in = saved.pop()
            for expert_in, hidden_act, activated in kept:
                grad_hidden = alloc(activated[1])
                free(activated, hidden_act)
                grads.append(alloc(expert_params))
                free(grad_hidden, expert_in)
            grad_in = alloc(tokens * hidden * 2)
            free(grad, qkv, attention, router, x_in)
            grad = grad_in
            grads.append(alloc(attention_params))
        free(grad, x)
        if adam is None:
            adam = [(alloc(p[1]), alloc(p[1])) for p in params]
        free(*grads)
    trace.free_trained(adam, params)
    return trace.rows


def random_resolution_cnn(channels=(64, 128, 256, 512), blocks=3, requests=150, seed=7):
    """A CNN serving batches of 1-16 images of random resolution (224-640 pixels square) in
    float32: every activation of a request has a size the last request's rarely had."""
    trace = MadeUpTrace()
    alloc, free = trace.alloc, trace.free
    rnd = random.Random(seed)
    weights = [alloc(9 * c * c * 4) for c in channels for _ in range(2 * blocks)]
    for _ in range(requests):
        batch, side = rnd.randint(1, 16), rnd.choice([224, 256, 320, 384, 448, 512, 640])
        x = alloc(batch * 3 * side * side * 4)
        for stage, c in enumerate(channels):
            plane = batch * c * (side >> (stage + 1)) ** 2 * 4
            for _ in range(blocks):
                conv, norm = alloc(plane), alloc(plane)
                free(conv)
                y = alloc(plane)
                free(norm, x)
                x = y
        out = alloc(batch * 1000 * 4)
        free(x, out)
    free(*weights)
    return trace.rows


def sharded_training(layers=24, hidden=2048, ranks=8, batch=2, seq=2048, vocab=32000, steps=8):
    """One rank of a transformer trained with fully sharded data parallelism (PyTorch's FSDP,
    ZeRO-3) in bfloat16 with float32 master weights: each rank keeps 1/`ranks` of every layer's
    parameters, gradients and AdamW states. Before a layer runs, its whole parameters are
    gathered into one flat buffer on the communication stream (1), the next layer's gathered
    ahead while it computes on stream 0, and freed when it is done (in the forward and again in
    the backward); the backward makes each layer's whole gradient on stream 0 and reduces it to
    this rank's shard in a buffer on stream 1. So every step cycles two streams' large buffers
    past activations that live from the forward to the backward."""
    trace = MadeUpTrace()
    alloc, free = trace.alloc, trace.free
    layer_params = 12 * hidden * hidden
    gathered_bytes, shard = layer_params * 2, layer_params // ranks
    masters = [alloc(shard * 4) for _ in range(layers)]  # float32 shards
    embedding = alloc(vocab * hidden * 4 // ranks)  # 31.25 MiB: not whole 2 MiB granules
    grads = [None] * layers
    adam = None
    tok = batch * seq
    act = tok * hidden * 2

    def gather():
        return alloc(gathered_bytes, 1)

    for _ in range(steps):
        ids = alloc(tok * 8)
        embed_full = alloc(vocab * hidden * 2, 1)
        x = alloc(act)
        free(embed_full)
        saved = []
        current = gather()
        for layer in range(layers):
            ahead = gather() if layer + 1 < layers else None
            ln1, qkv = alloc(act), alloc(3 * act)
            flash_out, flash_lse = alloc(act), alloc(batch * 16 * seq * 4)
            attention = alloc(act)
            x2 = alloc(act)
            ln2, up = alloc(act), alloc(4 * act)
            gelu = alloc(4 * act)
            down = alloc(act)
            x3 = alloc(act)
            free(attention, down)
            saved.append((ln1, qkv, flash_out, flash_lse, x2, ln2, up, gelu, x))
            x = x3
            free(current)
            current = ahead
        logits = alloc(tok * vocab * 2)
        grad_logits = alloc(tok * vocab * 2)
        free(logits)
        grad_x = alloc(act)
        free(grad_logits, x)
        current = gather()
        for layer in reversed(range(layers)):
            ahead = gather() if layer > 0 else None
            ln1, qkv, flash_out, flash_lse, x2, ln2, up, gelu, x_in = saved.pop()
            full_grad = alloc(gathered_bytes)
            grad_gelu = alloc(4 * act)
            free(gelu)
            grad_up = alloc(4 * act)
            free(grad_gelu, up)
            grad_x2 = alloc(act)
            free(grad_up, ln2)
            grad_qkv = alloc(3 * act)
            free(flash_out, flash_lse)
            grad_in = alloc(act)
            free(grad_qkv, qkv, ln1, grad_x, x2, x_in)
            reduced = alloc(shard * 2, 1)
            free(full_grad)
            if grads[layer] is None:
                grads[layer] = alloc(shard * 4)
            free(reduced, grad_x2)
            grad_x = grad_in
            free(current)
            current = ahead
        free(grad_x, ids)
        adam = trace.adamw_step(masters + [embedding], adam, 1)  # one shard at a time
        free(*grads)
        grads = [None] * layers
    trace.free_trained(adam, [embedding, *masters])
    return trace.rows


def checkpointed_training(layers=24, hidden=2560, batch=2, seq=4096, vocab=32000, steps=6):
    """A decoder trained with activation checkpointing (torch.utils.checkpoint around each
    layer), in bfloat16 with float32 weights, gradients and AdamW states: the forward keeps only
    each layer's input and frees the layer's activations as it goes; the backward recomputes one
    layer's activations at a time, then frees them beside the gradients it makes. So the same
    activations are allocated twice a step, the second time among the gradients that outlive
    them."""
    trace = MadeUpTrace()
    alloc, free = trace.alloc, trace.free
    ffn = -(-8 * hidden // 3 // 256) * 256  # SwiGLU's width as LLaMA rounds it: 6,912 for 2,560
    per_layer = [4 * hidden * hidden, 3 * hidden * ffn, hidden, hidden]
    params = [alloc(vocab * hidden * 4)]
    for _ in range(layers):
        params += [alloc(4 * n) for n in per_layer]
    grads = [None] * len(params)
    adam = None
    tok = batch * seq
    act = tok * hidden * 2

    def grad(*indices):
        for index in indices:
            if grads[index] is None:
                grads[index] = alloc(params[index][1])

    def layer_forward():
        ln1, qkv = alloc(act), alloc(3 * act)
        context = alloc(act)
        x2 = alloc(act)
        ln2, up = alloc(act), alloc(tok * ffn * 2)
        gate = alloc(tok * ffn * 2)
        down = alloc(act)
        out = alloc(act)
        free(down)
        return out, (ln1, qkv, context, x2, ln2, up, gate)

    for _ in range(steps):
        ids = alloc(tok * 8)
        x = alloc(act)
        inputs = []
        for _ in range(layers):
            out, kept = layer_forward()
            free(*kept)
            inputs.append(x)
            x = out
        logits = alloc(tok * vocab * 4)
        grad_logits = alloc(tok * vocab * 4)
        free(logits)
        grad_x = alloc(act)
        free(grad_logits, x)
        for layer in reversed(range(layers)):
            base = 1 + layer * len(per_layer)
            x_in = inputs.pop()
            out, (ln1, qkv, context, x2, ln2, up, gate) = layer_forward()  # recomputed
            free(out)
            grad_mid = alloc(tok * ffn * 2)
            grad(base + 1, base + 3)
            free(up, gate)
            grad_x2 = alloc(act)
            free(grad_mid, ln2)
            grad_qkv = alloc(3 * act)
            grad(base, base + 2)
            free(context)
            grad_in = alloc(act)
            free(grad_qkv, qkv, ln1, x2, grad_x2, grad_x, x_in)
            grad_x = grad_in
        grad(0)
        free(grad_x, ids)
        adam = trace.adamw_step(params, adam, 16)
        free(*grads)
        grads = [None] * len(params)
    trace.free_trained(adam, params)
    return trace.rows


def make_variants(traces, out):
    """Writes every variant whose source traces are in `traces`; returns their names."""
    traces, out = pathlib.Path(traces), pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cache = {}

    def source(name):
        if name not in cache:
            path = traces / f"{name}.csv"
            cache[name] = load(path) if path.is_file() else None
        return cache[name]

    variants = {}
    for name, factor in SCALED:
        if source(name) is not None:
            variants[f"scaled_{short(name)}_x{factor}"] = scaled(source(name), factor)
    for first, second in CONCATENATED:
        if source(first) is not None and source(second) is not None:
            variants[f"concat_{short(first)}_{short(second)}"] = concatenated(source(first),
                                                                            source(second))
    for first, second, seed in INTERLEAVED:
        if source(first) is not None and source(second) is not None:
            variants[f"two_streams_{short(first)}_{short(second)}"] = interleaved(
                source(first), source(second), seed)
    variants["kv_cache_cat_decode"] = kv_cache_decode()
    # float32 scores of a 32,000-token vocabulary for a batch of 16: 2,048,000 bytes, in the
    # large pool, kept between the caches the loop frees.
    variants["kv_cache_cat_kept_scores"] = kv_cache_decode(kept_scores=32000 * 4 * 16)
    variants["variable_length_inference"] = variable_length_inference()
    variants["variable_length_training"] = variable_length_training()
    variants["continuous_batching"] = continuous_batching()
    variants["moe_training"] = moe_training()
    variants["random_resolution_cnn"] = random_resolution_cnn()
    variants["sharded_training"] = sharded_training()
    variants["checkpointed_training"] = checkpointed_training()
    for name, rows in variants.items():
        save(out / f"{name}.csv", rows)
    return sorted(variants)


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    if not pathlib.Path(argv[1]).is_dir():
        print(f"make_variants.py: traces folder '{argv[1]}' not found", file=sys.stderr)
        return 2
    try:
        names = make_variants(argv[1], argv[2])
    except (OSError, ValueError) as error:
        print(f"make_variants.py: {error}", file=sys.stderr)
        return 2
    # Other traces in OUT_DIR (an earlier run's, or the user's) are left alone, but named: a
    # replay of OUT_DIR/*.csv would count them with the variants.
    made = {f"{name}.csv" for name in names}
    others = sorted(p.name for p in pathlib.Path(argv[2]).glob("*.csv") if p.name not in made)
    if others:
        print(f"make_variants.py: {argv[2]} also holds {len(others)} other trace(s), not made by "
              f"this run: {', '.join(others)}", file=sys.stderr)
    print("\n".join(names))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
