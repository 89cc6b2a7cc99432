"""Independent NumPy implementations of the paper's formulas, for tests,
and `dense_weights` and `attention_weights`, which hand them a Keras
layer's weights."""

import numpy as np


def softmax(x):
    shifted = x - x.max(axis=-1, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=-1, keepdims=True)


def attention(q, k, v, mask=None):
    """q [..., tq, d], k [..., tk, d], mask True = attend; returns (out, w)."""
    logits = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        logits = np.where(mask, logits, -np.inf)
    weights = softmax(logits)
    return weights @ v, weights


def dense(x, kernel, bias):
    return x @ kernel + bias


def randomize_weights(layer, seed):
    """Draws every weight of the built `layer` at random: with Keras' zero
    biases and unit gammas, a layer that dropped a bias or LayerNorm's
    affine terms, or mixed up two sub-layers' weights, would still match
    a reference."""
    rng = np.random.default_rng(seed)
    for weight in layer.trainable_weights:
        weight.assign(rng.normal(scale=0.3, size=weight.shape).astype(np.float32))


def dense_weights(layer):
    """(kernel, bias) of a Keras Dense as NumPy arrays, as `dense` and
    `feed_forward` take them."""
    return layer.kernel.numpy(), layer.bias.numpy()


def attention_weights(layer):
    """The dict of (kernel, bias) pairs `multi_head_attention` takes, from
    our Keras `MultiHeadAttention`."""
    return {
        name: dense_weights(getattr(layer, f"{name}_dense"))
        for name in ("query", "key", "value", "output")
    }


def multi_head_attention(query, key_value, w, num_heads, mask=None):
    """w: dict of (kernel, bias) for query/key/value/output."""

    def split(x):
        b, t, d = x.shape
        return x.reshape(b, t, num_heads, d // num_heads).transpose(0, 2, 1, 3)

    q = split(dense(query, *w["query"]))
    k = split(dense(key_value, *w["key"]))
    v = split(dense(key_value, *w["value"]))
    out, weights = attention(q, k, v, mask)
    b, h, t, d = out.shape
    out = out.transpose(0, 2, 1, 3).reshape(b, t, h * d)
    return dense(out, *w["output"]), weights


def layer_norm(x, gamma, beta, epsilon=1e-6):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + epsilon) * gamma + beta


def feed_forward(x, w1, b1, w2, b2):
    return np.maximum(0.0, x @ w1 + b1) @ w2 + b2


def decoder_layer(x, memory, w, num_heads, memory_mask, pre_norm, branch_scale=1.0):
    """One decoder layer (section 3.1) on x `[batch, target_length,
    d_model]`: causally masked self-attention, attention over `memory`
    `[batch, source_length, d_model]` (`memory_mask` True = attend), then
    the feed-forward network, each sub-layer with a residual connection
    and LayerNorm: post-norm, LayerNorm(x + Sublayer(x)), as in the paper,
    or pre-norm, x + Sublayer(LayerNorm(x)). No dropout (inference), but
    for a pre-norm layer's `branch_scale` (a number, or `[batch, 1, 1]`:
    stochastic depth's per-sentence mask), which multiplies every
    Sublayer(...).

    w: "self_attention" and "cross_attention", dicts as
    `multi_head_attention` takes; "feed_forward", (w1, b1, w2, b2);
    "self_attention_norm", "cross_attention_norm" and "feed_forward_norm",
    (gamma, beta).
    """
    length = x.shape[1]
    causal = np.tril(np.ones((length, length), bool))
    sublayers = (
        (
            lambda h: multi_head_attention(
                h, h, w["self_attention"], num_heads, causal
            )[0],
            w["self_attention_norm"],
        ),
        (
            lambda h: multi_head_attention(
                h, memory, w["cross_attention"], num_heads, memory_mask
            )[0],
            w["cross_attention_norm"],
        ),
        (lambda h: feed_forward(h, *w["feed_forward"]), w["feed_forward_norm"]),
    )
    for sublayer, norm in sublayers:
        if pre_norm:
            x = x + branch_scale * sublayer(layer_norm(x, *norm))
        else:
            x = layer_norm(x + sublayer(x), *norm)
    return x


def positional_encoding(length, d_model):
    pe = np.zeros((length, d_model))
    for pos in range(length):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            pe[pos, 2 * i] = np.sin(angle)
            pe[pos, 2 * i + 1] = np.cos(angle)
    return pe


def transformer_lr(step, d_model, warmup):
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def adam(weights, gradients, learning_rates, beta_1, beta_2, epsilon):
    """`weights` after one Adam update (Kingma & Ba, algorithm 1, with the
    bias corrections folded into the step size) per gradient, in float64."""
    w = np.array(weights, np.float64)
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t, (g, lr) in enumerate(zip(gradients, learning_rates), start=1):
        m = beta_1 * m + (1 - beta_1) * g
        v = beta_2 * v + (1 - beta_2) * g * g
        w -= lr * np.sqrt(1 - beta_2**t) / (1 - beta_1**t) * m / (np.sqrt(v) + epsilon)
    return w


def smoothed_cross_entropy(labels, logits, epsilon, pad_id=0):
    """Mean over non-pad tokens of -sum_k q_k log p_k with a smoothed q."""
    vocab = logits.shape[-1]
    total, count = 0.0, 0
    for b in range(labels.shape[0]):
        for t in range(labels.shape[1]):
            if labels[b, t] == pad_id:
                continue
            log_p = np.log(softmax(logits[b, t]))
            q = np.full(vocab, epsilon / vocab)
            q[labels[b, t]] += 1.0 - epsilon
            total += -(q * log_p).sum()
            count += 1
    return total / count
