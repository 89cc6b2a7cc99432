#!/usr/bin/env python3
r"""Training throughput on real Multi30k batches, against the matmul ceiling.

    python scripts/bench_train.py --flagfile=flags/multi30k.cfg \
        --precisions=fp32,bf16 [--bench_steps=20] [--bench_rounds=3] \
        [--json=OUT]
    # LayerNorm's C++ kernel against TensorFlow ops, in bf16:
    python scripts/bench_train.py --flagfile=flags/multi30k.cfg \
        --precisions=bf16:tf,bf16:auto

The precisions take turns, `--bench_rounds` times: each turn builds a
Trainer on Multi30k en-de (the flagfile's model and batch size) in that
precision, runs `--bench_warmup` steps (tracing) and times `--bench_steps`
steps of the real input pipeline; a precision's figure is its median
turn (of an even number, the faster middle one). One untimed turn of
the first precision comes first. Prints ms/step, real tokens/s, and
model FLOP utilisation (MFU) against this machine's matmul rate in that
precision, measured in the same process (machines differ up to 2x
between sessions, so only ratios within one run compare).

Why so: the first steps timed in a process ran ~1.5x slower than the
same steps timed later, whatever the precision (quickstart model, bf16
first: 466 ms/step, then fp32 450, bf16 305, fp32 473), so timing each
precision once, one after the other, flattered whichever came second.
The cause (scripts/profile_train.py): the loss is XLA-compiled once per
batch shape, for both precisions alike, so the first turn in a process
also compiles (base model, fp32: 4,104 ms/step in the first turn, 3,646
in the next). Every turn meets the same batches, so after the untimed
turn none compiles. A turn builds its own Trainer because one whose
pipeline ran after another Trainer's lost its tokenizer resource
("Resource ..._SentencepieceOp does not exist"; seen with TF 2.21,
tf-text 2.21).

FLOPs of a step are counted on the padded batch, forward x 3 (backward is
twice the forward), for S source and T target positions per sentence:
  encoder layer, per source token: 8 d^2 (Q,K,V,O) + 4 d d_ff + 4 S d
  decoder layer, per target token: 8 d^2 (self Q,K,V,O) + 4 d^2 (cross Q,O)
      + 4 d d_ff + 4 T d (self scores and sums) + 4 S d (cross)
    and per source token: 4 d^2 (cross K,V)
  output projection, per target token: 2 d V
(2 FLOPs per multiply-add; embeddings, softmax, LayerNorm and the loss are
not counted: they are not matmuls).
"""

import json
import os
import sys
import tempfile
import time

from absl import app, flags

from t2t_repro.cli.flags import (
    define_training_flags,
    model_config_from_flags,
    settings_from_flags,
)
from t2t_repro.config import TrainingOptions

define_training_flags()
flags.DEFINE_list(
    "precisions",
    ["fp32", "bf16"],
    "Precisions to compare: --mixed_precision values, or grappler_bf16 (a "
    "float32 model that Grappler's oneDNN auto mixed precision rewrites to "
    "bf16, the way Intel's TensorFlow guides suggest); each optionally "
    "with :CPU_KERNELS, a --cpu_kernels value for that entry "
    "(bf16:tf).",
)
flags.DEFINE_integer("bench_warmup", 5, "Untimed steps of each turn.")
flags.DEFINE_integer("bench_steps", 20, "Timed steps of each turn.")
flags.DEFINE_integer("bench_rounds", 3, "Turns of each precision.")
flags.DEFINE_string("json", None, "Also write the results here.")
FLAGS = flags.FLAGS

# Multi30k en-de as `t2t-fetch multi30k` puts it, when the flags give no
# training files (flags/base.cfg is a recipe without data).
_DEFAULT_TRAIN = ("data/multi30k/train.en.gz", "data/multi30k/train.de.gz")
_GRAPPLER_BF16 = "grappler_bf16"


def step_flops(config, batch, source_length, target_length):
    """Matmul FLOPs of one training step on a padded batch (see above)."""
    d, d_ff, vocab = config.d_model, config.d_ff, config.vocab_size
    s, t = source_length, target_length
    encoder = config.num_encoder_layers * s * (8 * d * d + 4 * d * d_ff + 4 * s * d)
    decoder = config.num_decoder_layers * (
        t * (12 * d * d + 4 * d * d_ff + 4 * t * d + 4 * s * d) + s * 4 * d * d
    )
    projection = t * 2 * d * vocab
    return 3 * batch * (encoder + decoder + projection)


def compiled_step(precision, cpu_kernels, proto, pairs, model_dir, strategy):
    """(config, options, input iterator, compiled training step) of a new
    Trainer on `pairs` in `precision` with `cpu_kernels`, with the
    flagfile's model and batch size."""
    from t2t_repro.data import vocabulary
    from t2t_repro.training.prepare import prepare_run

    options = settings_from_flags(
        TrainingOptions,
        model_dir=model_dir,
        mixed_precision=precision,
        cpu_kernels=cpu_kernels,
    )
    config = model_config_from_flags(vocabulary.vocab_size_of(proto))
    trainer = prepare_run(config, options, strategy, proto, pairs)
    iterator = trainer.input_state.iterator
    return (config, options, iterator, trainer.compile_step(iterator.element_spec))


def run_steps(steps, config, options, iterator, train_step):
    """(seconds, matmul FLOPs, real tokens) of `steps` training steps."""
    flops = 0
    outputs = []
    start = time.perf_counter()
    for _ in range(steps):
        micro = tuple(next(iterator) for _ in range(options.accum_steps))
        for (source, target_input), _ in micro:
            batch, s = source.shape
            flops += step_flops(config, batch, s, target_input.shape[1])
        outputs.append(train_step(micro))
    real = sum(float(o["real_tokens"]) for o in outputs)  # syncs
    return time.perf_counter() - start, flops, real


def split_entry(entry):
    """(precision, cpu_kernels) of a `--precisions` entry."""
    precision, _, cpu_kernels = entry.partition(":")
    return precision, cpu_kernels or FLAGS.cpu_kernels


def turn(entry, proto, pairs, model_dir, strategy):
    """(seconds, matmul FLOPs, real tokens) of `--bench_steps` steps of
    one `--precisions` entry after `--bench_warmup` untimed ones, on a new
    Trainer."""
    import tensorflow as tf

    precision, cpu_kernels = split_entry(entry)
    rewrite = precision == _GRAPPLER_BF16
    # A process-wide option, read when a turn's new step is traced.
    tf.config.optimizer.set_experimental_options(
        {"auto_mixed_precision_onednn_bfloat16": rewrite}
    )
    try:
        step = compiled_step(
            "fp32" if rewrite else precision,
            cpu_kernels,
            proto,
            pairs,
            model_dir,
            strategy,
        )
        run_steps(FLAGS.bench_warmup, *step)
        return run_steps(FLAGS.bench_steps, *step)
    finally:
        tf.config.optimizer.set_experimental_options(
            {"auto_mixed_precision_onednn_bfloat16": False}
        )


def multi30k_vocabulary_and_pairs(directory):
    """(SentencePiece proto of `--vocab_size` pieces trained into
    `directory`, training pairs) of --train_src/--train_tgt, by default
    Multi30k en-de."""
    from t2t_repro.data import text_files, vocabulary
    from t2t_repro.data.sources import Corpus

    source, target = (
        (FLAGS.train_src, FLAGS.train_tgt) if FLAGS.train_src else _DEFAULT_TRAIN
    )
    corpus = Corpus(source_path=source, target_path=target)
    path = os.path.join(directory, vocabulary.SPM_MODEL_FILENAME)
    vocabulary.train_sentencepiece(
        text_files.read_lines(corpus.source_path)
        + text_files.read_lines(corpus.target_path),
        FLAGS.vocab_size,
        path,
    )
    return vocabulary.load_sentencepiece(path), corpus.pairs()


def bench(proto, pairs, directory):
    """A row per precision, of its median turn (see the docstring)."""
    from t2t_repro.training import distribution

    strategy = distribution.make_strategy(1)
    turns = {precision: [] for precision in FLAGS.precisions}
    for number in range(1 + FLAGS.bench_rounds * len(turns)):
        precision = FLAGS.precisions[max(0, number - 1) % len(turns)]
        result = turn(
            precision, proto, pairs, os.path.join(directory, str(number)), strategy
        )
        if number:  # the first turn warms the process up
            turns[precision].append(result)
    rows = []
    for precision, results in turns.items():
        # The lower median: noise only slows a turn down.
        seconds, flops, real = sorted(results)[(len(results) - 1) // 2]
        rows.append(
            {
                "precision": precision,
                "ms_per_step": round(1000 * seconds / FLAGS.bench_steps, 1),
                "turns_ms_per_step": [
                    round(1000 * r[0] / FLAGS.bench_steps, 1) for r in results
                ],
                "real_tokens_per_second": round(real / seconds),
                "model_gflops_per_second": round(flops / seconds / 1e9, 1),
            }
        )
    return rows


def main(argv):
    del argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_matmul import cpu_description, describe_cpu, matmul_gflops

    with tempfile.TemporaryDirectory() as directory:
        rows = bench(*multi30k_vocabulary_and_pairs(directory), directory)
    for row in rows:
        bf16 = split_entry(row["precision"])[0] in ("bf16", _GRAPPLER_BF16)
        dtype = "bfloat16" if bf16 else "float32"
        ceiling = matmul_gflops(2048, dtype)
        row["matmul_ceiling_gflops"] = round(ceiling, 1)
        row["mfu"] = round(row["model_gflops_per_second"] / ceiling, 3)
    base = rows[0]["real_tokens_per_second"]
    print(describe_cpu())
    print(
        f"{'precision':<14} {'ms/step':>8} {'tokens/s':>9} {'x first':>8} "
        f"{'GFLOP/s':>8} {'ceiling':>8} {'MFU':>6}"
    )
    for row in rows:
        print(
            f"{row['precision']:<14} {row['ms_per_step']:>8.1f} "
            f"{row['real_tokens_per_second']:>9d} "
            f"{row['real_tokens_per_second'] / base:>8.2f} "
            f"{row['model_gflops_per_second']:>8.1f} "
            f"{row['matmul_ceiling_gflops']:>8.1f} {row['mfu']:>6.3f}  "
            f"turns {row['turns_ms_per_step']}"
        )
    if FLAGS.json:
        with open(FLAGS.json, "w", encoding="utf-8") as handle:
            json.dump({"cpu": cpu_description(), "rows": rows}, handle, indent=2)


if __name__ == "__main__":
    app.run(main)
