#!/usr/bin/env python3
r"""Where a SavedModel's serving_default spends its time, op type by op type.

    python scripts/profile_serving.py --saved_model=exports/multi30k/950 \
        [--input=data/multi30k/test_2016_flickr.en.gz] \
        [--batch=32] [--batches=3] [--top=25] [--intra_op_threads=N]

Loads the export into a tf.compat.v1 Session, as TF Serving's C++ loader
does (no XLA), translates the longest --batch x --batches input lines once
to warm up, then once more with a full trace (RunOptions.FULL_TRACE), and
prints each op type's total time over all executions (loop iterations
included), its count, and its share. Op times overlap across the inter-op
threads, so the shares are of the summed op time, not of wall time.
--intra_op_threads is TF Serving's --tensorflow_intra_op_parallelism.
"""

import collections
import time

from absl import app, flags
from bench_matmul import describe_cpu
from serving_threads import intra_op_threads

flags.DEFINE_string("saved_model", None, "A t2t-export version directory.")
flags.DEFINE_string(
    "input",
    "data/multi30k/test_2016_flickr.en.gz",
    "Source sentences, one per line (.gz too).",
)
flags.DEFINE_integer("batch", 32, "Sentences per request.")
flags.DEFINE_integer("batches", 3, "Requests traced.")
flags.DEFINE_integer("top", 25, "Op types listed.")
flags.mark_flags_as_required(["saved_model"])
FLAGS = flags.FLAGS


def _op_type(node):
    """The op type in a step-stats node's label "name = Type(inputs)"."""
    _, _, rest = node.timeline_label.partition(" = ")
    return rest.partition("(")[0] or "?"


def main(argv):
    del argv
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  registers the SentencePiece ops

    from t2t_repro.data.text_files import read_lines

    sentences = sorted(read_lines(FLAGS.input), key=lambda s: -len(s.split()))
    requests = [
        sentences[i * FLAGS.batch : (i + 1) * FLAGS.batch] for i in range(FLAGS.batches)
    ]
    threads = intra_op_threads(FLAGS.saved_model)
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads)
    with tf.compat.v1.Session(graph=tf.Graph(), config=config) as session:
        meta_graph = tf.compat.v1.saved_model.loader.load(
            session, ["serve"], FLAGS.saved_model
        )
        signature = meta_graph.signature_def["serving_default"]
        fetch = signature.outputs["translations"].name
        feed = signature.inputs["inputs"].name
        for request in requests:
            session.run(fetch, {feed: request})
        options = tf.compat.v1.RunOptions(
            trace_level=tf.compat.v1.RunOptions.FULL_TRACE
        )
        micros, counts = collections.Counter(), collections.Counter()
        wall = 0.0
        for request in requests:
            metadata = tf.compat.v1.RunMetadata()
            start = time.perf_counter()
            session.run(fetch, {feed: request}, options=options, run_metadata=metadata)
            wall += time.perf_counter() - start
            for device in metadata.step_stats.dev_stats:
                for node in device.node_stats:
                    micros[_op_type(node)] += node.all_end_rel_micros
                    counts[_op_type(node)] += 1
    total = sum(micros.values())
    print(describe_cpu())
    print(
        f"{FLAGS.saved_model}: {FLAGS.batches} requests of {FLAGS.batch} "
        f"sentences, {threads or 'default'} intra-op threads, traced wall "
        f"{wall:.2f} s, summed op time {total / 1e6:.2f} s"
    )
    print(f"{'op type':32} {'ms':>9} {'count':>8} {'us/op':>8} {'share':>6}")
    for op, value in micros.most_common(FLAGS.top):
        print(
            f"{op:32} {value / 1e3:9.1f} {counts[op]:8d} "
            f"{value / counts[op]:8.1f} {value / total:6.1%}"
        )


if __name__ == "__main__":
    app.run(main)
