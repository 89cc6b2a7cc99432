#!/usr/bin/env python3
r"""What the XLA beam search's cache handling costs: variants of it compiled
in one process, then timed in turns over the same batches (machines drift
within minutes here, so separate runs do not compare).

    python scripts/ablate_xla_beam_search.py --model_dir=runs/multi30k \
        [--variants=scatter+gather,dus+gather,scatter+flat,scatter+none]

A variant is WRITE+REORDER. WRITE, how a step writes its keys and values
into the fixed-size buffers: `scatter` (the code's `write_positions`) or
`dus` (XLA's dynamic_update_slice, which has no TensorFlow kernel).
REORDER, how beam search takes the cache rows of each hypothesis's
parent: `gather` (the code's `reorder_decode_cache`), `flat` (a gather of
rows of a 2-d view) or `none` (no reorder: wrong translations, an upper
bound on what a cheaper reorder could buy). One search over each batch
(--batch sentences, length-sorted, as one of two side-by-side searches of
a batch of 64 or 32 would get), beam 4; prints sentences/s of each round
and the output tokens (equal for variants that give the same
translations).
"""

import statistics
import time

from absl import app, flags

flags.DEFINE_string("model_dir", None, "A t2t-train run.")
flags.DEFINE_string(
    "input",
    "data/multi30k/test_2016_flickr.en.gz",
    "Source sentences, one per line (.gz too).",
)
flags.DEFINE_integer("sentences", 1000, "How many input lines to translate.")
flags.DEFINE_integer("batch", 16, "Sentences per search.")
flags.DEFINE_integer("rounds", 3, "Timed passes per variant, in turns.")
flags.DEFINE_list(
    "variants",
    ["scatter+gather", "dus+gather", "scatter+flat", "scatter+none"],
    "WRITE+REORDER pairs (see the module docstring).",
)
flags.mark_flags_as_required(["model_dir"])
FLAGS = flags.FLAGS


def main(_):
    import tensorflow as tf
    from tensorflow.compiler.tf2xla.python import xla

    import t2t_repro.layers.multi_head_attention as attention
    from t2t_repro.checkpoints import load_model
    from t2t_repro.config import DecodingOptions
    from t2t_repro.data.text_files import read_lines
    from t2t_repro.data.vocabulary import make_tokenizer
    from t2t_repro.decoding.beam_search import beam_search
    from t2t_repro.inference.graph import TranslationGraph
    from t2t_repro.model import Transformer

    def flat(t, rows):
        shape = tf.shape(t)
        return tf.reshape(tf.gather(tf.reshape(t, [shape[0], -1]), rows), shape)

    writes = {
        "scatter": attention.write_positions,
        "dus": lambda cache, update, index: xla.dynamic_update_slice(
            cache, update, tf.stack([0, 0, index, 0])
        ),
    }
    reorders = {
        "gather": lambda t, rows: tf.gather(t, rows),
        "flat": flat,
        "none": lambda t, rows: t,
    }

    model, proto, _ = load_model(FLAGS.model_dir)
    graph = TranslationGraph(model, make_tokenizer(proto), DecodingOptions())
    lines = read_lines(FLAGS.input)[: FLAGS.sentences]
    lines.sort(key=lambda line: -len(line.split()))
    batches = [
        graph.source_ids(tf.constant(lines[i : i + FLAGS.batch]))[0]
        for i in range(0, len(lines), FLAGS.batch)
    ]

    searches = {}
    for variant in FLAGS.variants:
        write, reorder = variant.split("+")
        attention.write_positions = writes[write]

        def reorder_cache(cache, rows, sentences=None, take=reorders[reorder]):
            return {
                **cache,
                "self": tf.nest.map_structure(lambda t: take(t, rows), cache["self"]),
            }

        Transformer.reorder_decode_cache = staticmethod(reorder_cache)
        search = tf.function(
            lambda ids: beam_search(
                model, ids, 4, 0.6, exact_n_best=False, fixed_shapes=True
            )[0][:, 0],
            jit_compile=True,
        )
        # Traces and compiles every batch shape with this variant's code.
        tokens = sum(int(tf.math.count_nonzero(search(ids))) for ids in batches)
        print(f"{variant}: compiled, {tokens} output tokens", flush=True)
        searches[variant] = search
    rates = {variant: [] for variant in FLAGS.variants}
    for _ in range(FLAGS.rounds):
        for variant, search in searches.items():
            start = time.perf_counter()
            for ids in batches:
                search(ids).numpy()
            rates[variant].append(len(lines) / (time.perf_counter() - start))
    from bench_matmul import describe_cpu

    print(describe_cpu())
    for variant, values in rates.items():
        print(
            f"{variant}: median {statistics.median(values):.1f} "
            f"sentences/s, rounds {', '.join(f'{v:.1f}' for v in values)}"
        )


if __name__ == "__main__":
    app.run(main)
