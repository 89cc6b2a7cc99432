#!/usr/bin/env python3
r"""Alternatives to pieces of a training step, each timed against the
code the model runs, forward and backward, in fp32 and bf16, in turns in
one process.

    python scripts/ablate_train_ops.py [--rows=8192] [--width=512] \
        [--projection_width=256] [--rounds=3] [--iterations=30]

- `layer_norm`: the package's LayerNormalization in TensorFlow ops
  (closed-form gradient) against its C++ kernel (t2t_repro.kernels, what
  training runs where it builds) and against LayerNorm as one fused
  batch-norm op (`fused_batch_norm` over a `[1, rows, width, 1]` NCHW
  view: each row is a "channel"), the affine terms after it.
- `attention_weights`: scale, padding mask and softmax of `[rows / 32,
  4, 32, 32]` attention logits, the TensorFlow ops against the C++ kernel.
- `dropout`: `layers.Dropout(0.3)` on `[rows, width]`, the TensorFlow ops
  against the C++ kernel (the same mask: max diff 0).
- `qkv`: three `[rows, d] x [d, d]` projections with biases (the
  attention layer's) against one `[rows, d] x [d, 3d]` matmul of the
  concatenated weights, split after it (`--projection_width` d).
- `bias_gradient`: the bias gradient of a `[rows, 4 * width]` dense
  layer: BiasAddGrad, a matmul of ones (the package's `Dense`), and a
  reduce_sum.
- `dense`: the package's `Dense` (its float32 bias gradient) against
  Keras' (BiasAddGrad), `[rows, width] -> [rows, 4 * width]` with ReLU.

Prints ms per call of each (the median round) and the largest difference
from the code's result, with the CPU and this process's matmul ceiling.
"""

import os
import statistics
import sys
import time

from absl import app, flags

flags.DEFINE_integer("rows", 8192, "Token positions (rows) per call.")
flags.DEFINE_integer("width", 512, "d_model of the LayerNorm and bias cases.")
flags.DEFINE_integer("projection_width", 256, "d_model of the qkv case.")
flags.DEFINE_integer("rounds", 3, "Timed rounds; each times every variant.")
flags.DEFINE_integer("iterations", 30, "Calls per variant per round.")
FLAGS = flags.FLAGS


def layer_norm_cases(tf, dtype):
    from t2t_repro import kernels
    from t2t_repro.layers.layer_normalization import layer_norm

    def fused(x, gamma, beta):
        rows = tf.shape(x)[0]
        normed, _, _ = tf.compat.v1.nn.fused_batch_norm(
            tf.reshape(x, [1, rows, x.shape[-1], 1]),
            tf.ones([rows]),
            tf.zeros([rows]),
            epsilon=1e-6,
            data_format="NCHW",
            is_training=True,
        )
        normed = tf.reshape(normed, tf.shape(x))
        return normed * tf.cast(gamma, dtype) + tf.cast(beta, dtype)

    def code(x, gamma, beta):
        return layer_norm(x, gamma, beta, 1e-6)

    def kernel(x, gamma, beta):
        return kernels.layer_norm(x, gamma, beta, 1e-6)

    rng = tf.random.Generator.from_seed(0)
    x = tf.Variable(rng.normal([FLAGS.rows, FLAGS.width]) * 3 + 1)
    gamma = tf.Variable(rng.normal([FLAGS.width]) * 0.1 + 1)
    beta = tf.Variable(rng.normal([FLAGS.width]) * 0.1)
    if kernels.library() is None:
        raise SystemExit("the LayerNorm kernel does not build here (see the log)")
    upstream = tf.cast(rng.normal([FLAGS.rows, FLAGS.width]), dtype)

    def case(norm):
        @tf.function
        def step():
            with tf.GradientTape() as tape:
                inputs = tf.cast(x, dtype)
                tape.watch(inputs)
                y = tf.cast(norm(inputs, gamma, beta), dtype)
                loss = tf.reduce_sum(tf.cast(y * upstream, tf.float32))
            return [y, *tape.gradient(loss, [inputs, gamma, beta])]

        return step

    return {
        "code": case(code),
        "cpp_kernel": case(kernel),
        "fused_batch_norm": case(fused),
    }


def attention_weights_cases(tf, dtype):
    from t2t_repro import kernels
    from t2t_repro.layers.scaled_dot_product_attention import _masked_softmax

    rng = tf.random.Generator.from_seed(0)
    shape = [FLAGS.rows // 32, 4, 32, 32]
    logits = tf.Variable(rng.normal(shape) * 3)
    mask = rng.uniform([shape[0], 1, 1, shape[-1]]) > 0.2
    upstream = tf.cast(rng.normal(shape), dtype)
    depth_sqrt = tf.sqrt(64.0)

    def code(z):
        return tf.cast(_masked_softmax(z, mask, depth_sqrt), dtype)

    def kernel(z):
        return kernels.masked_softmax(z, mask, depth_sqrt)

    def case(weights_of):
        @tf.function
        def step():
            with tf.GradientTape() as tape:
                inputs = tf.cast(logits, dtype)
                tape.watch(inputs)
                weights = weights_of(inputs)
                loss = tf.reduce_sum(tf.cast(weights * upstream, tf.float32))
            return [weights, tape.gradient(loss, inputs)]

        return step

    return {"code": case(code), "cpp_kernel": case(kernel)}


def dropout_cases(tf, dtype):
    from t2t_repro import kernels, layers

    rng = tf.random.Generator.from_seed(0)
    x = tf.Variable(rng.normal([FLAGS.rows, FLAGS.width]))
    upstream = tf.cast(rng.normal([FLAGS.rows, FLAGS.width]), dtype)
    policy = "float32" if dtype == tf.float32 else "mixed_bfloat16"

    def case(use_kernels):
        dropout = layers.Dropout(0.3, seed=1, dtype=policy)
        seed_state = tf.identity(dropout.seed_generator.state)

        @tf.function
        def step():
            # The same mask in every call of either variant.
            dropout.seed_generator.state.assign(seed_state)
            with tf.GradientTape() as tape:
                inputs = tf.cast(x, dtype)
                tape.watch(inputs)
                y = dropout(inputs, training=True)
                loss = tf.reduce_sum(tf.cast(y * upstream, tf.float32))
            return [y, tape.gradient(loss, inputs)]

        with kernels.enabled(use_kernels):  # traced here: kernel or ops
            step.get_concrete_function()
        return step

    return {"code": case(False), "cpp_kernel": case(True)}


def qkv_cases(tf, dtype):
    d = FLAGS.projection_width
    rng = tf.random.Generator.from_seed(1)
    x = tf.Variable(rng.normal([FLAGS.rows, d]))
    kernels = [tf.Variable(rng.normal([d, d]) * d**-0.5) for _ in range(3)]
    biases = [tf.Variable(rng.normal([d]) * 0.1) for _ in range(3)]
    upstream = [tf.cast(rng.normal([FLAGS.rows, d]), dtype) for _ in range(3)]

    def case(project):
        @tf.function
        def step():
            with tf.GradientTape() as tape:
                outputs = project(tf.cast(x, dtype))
                loss = tf.add_n(
                    [
                        tf.reduce_sum(tf.cast(y * u, tf.float32))
                        for y, u in zip(outputs, upstream)
                    ]
                )
            return tape.gradient(loss, [x, *kernels, *biases])

        return step

    def separate(inputs):
        return [
            tf.nn.bias_add(tf.matmul(inputs, tf.cast(k, dtype)), tf.cast(b, dtype))
            for k, b in zip(kernels, biases)
        ]

    def concatenated(inputs):
        kernel = tf.cast(tf.concat(kernels, 1), dtype)
        bias = tf.cast(tf.concat(biases, 0), dtype)
        return tf.split(tf.nn.bias_add(tf.matmul(inputs, kernel), bias), 3, axis=1)

    return {"code": case(separate), "one_matmul": case(concatenated)}


def bias_gradient_cases(tf, dtype):
    rng = tf.random.Generator.from_seed(2)
    upstream = tf.cast(rng.normal([FLAGS.rows, 4 * FLAGS.width]), dtype)
    ones = tf.ones([1, FLAGS.rows], dtype)
    return {
        "code": tf.function(lambda: [tf.matmul(ones, upstream)[0]]),
        "bias_add_grad": tf.function(
            lambda: [tf.raw_ops.BiasAddGrad(out_backprop=upstream)]
        ),
        "reduce_sum": tf.function(lambda: [tf.reduce_sum(upstream, 0)]),
        "float64_numpy": lambda: [upstream.numpy().astype("float64").sum(0)],
    }


def dense_cases(tf, dtype):
    import keras

    from t2t_repro.layers import Dense

    rng = tf.random.Generator.from_seed(3)
    x = tf.Variable(rng.normal([FLAGS.rows, FLAGS.width]))
    upstream = rng.normal([FLAGS.rows, 4 * FLAGS.width])
    policy = "mixed_bfloat16" if dtype == tf.bfloat16 else "float32"

    def case(layer_class):
        dense = layer_class(4 * FLAGS.width, activation="relu", dtype=policy)
        dense.build(x.shape)
        for weight, seed in zip(dense.trainable_weights, (4, 5)):
            weight.assign(tf.random.stateless_normal(weight.shape, [seed, 0]) * 0.05)

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                y = dense(x)
                loss = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
            return [y, *tape.gradient(loss, [x, *dense.trainable_weights])]

        return step

    return {"code": case(Dense), "keras_dense": case(keras.layers.Dense)}


def largest_difference(tf, results, reference):
    return max(
        float(tf.reduce_max(tf.abs(tf.cast(a, tf.float32) - tf.cast(b, tf.float32))))
        for a, b in zip(results, reference)
    )


def main(argv):
    del argv
    import tensorflow as tf

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_matmul import describe_cpu, matmul_gflops

    print(describe_cpu())
    fp32, bf16 = (matmul_gflops(2048, dtype) for dtype in ("float32", "bfloat16"))
    print(f"matmul 2048^3 GFLOP/s: fp32 {fp32:.0f}, bf16 {bf16:.0f}")
    print(f"{'case':<17} {'precision':<9} {'variant':<17} {'ms':>7} {'max diff':>9}")
    for name, cases in (
        ("layer_norm", layer_norm_cases),
        ("attention_weights", attention_weights_cases),
        ("dropout", dropout_cases),
        ("qkv", qkv_cases),
        ("bias_gradient", bias_gradient_cases),
        ("dense", dense_cases),
    ):
        for precision, dtype in (("fp32", tf.float32), ("bf16", tf.bfloat16)):
            variants = cases(tf, dtype)
            reference = variants["code"]()
            differences = {
                variant: largest_difference(tf, step(), reference)
                for variant, step in variants.items()
            }
            times = {variant: [] for variant in variants}
            for _ in range(FLAGS.rounds):
                for variant, step in variants.items():
                    start = time.perf_counter()
                    for _ in range(FLAGS.iterations):
                        step()
                    times[variant].append(
                        1000 * (time.perf_counter() - start) / FLAGS.iterations
                    )
            for variant in variants:
                print(
                    f"{name:<17} {precision:<9} {variant:<17} "
                    f"{statistics.median(times[variant]):>7.2f} "
                    f"{differences[variant]:>9.3g}"
                )


if __name__ == "__main__":
    app.run(main)
