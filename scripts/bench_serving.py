#!/usr/bin/env python3
r"""First-request latency of a SavedModel with and without its warm-up
records, and single-sentence latency, through the Python loader.

    python scripts/bench_serving.py --saved_model=exports/multi30k/950 \
        [--input=data/multi30k/test_2016_flickr.en.gz] [--json=OUT]

Each mode runs in a fresh process that imports only tensorflow and
tensorflow_text (as a model server would start): it loads the export,
replays `assets.extra/tf_serving_warmup_requests` as TF Serving does
(mode "warm") or not ("cold"), then times its first request (a batch of
--first_batch input lines) and --requests single-sentence requests (p50,
p95). The matmul ceiling is printed too, since machines differ.
--intra_op_threads is TF Serving's --tensorflow_intra_op_parallelism: one
sentence is one search, so fewer threads per op cost latency here while
they gain throughput on batches (docs/performance.md#decoding-threads).
"""

import json
import os
import subprocess
import sys

from absl import app, flags
from serving_threads import intra_op_threads

flags.DEFINE_string("saved_model", None, "A t2t-export version directory.")
flags.DEFINE_string(
    "input",
    "data/multi30k/test_2016_flickr.en.gz",
    "Source sentences, one per line (.gz too).",
)
flags.DEFINE_integer("first_batch", 32, "Sentences in the first request.")
flags.DEFINE_integer(
    "requests", 100, "Single-sentence requests timed after the first one."
)
flags.DEFINE_string("json", None, "Also write the results here.")
flags.DEFINE_enum(
    "child",
    None,
    ["cold", "warm"],
    "(internal) run one mode in this process and print JSON.",
)
flags.mark_flags_as_required(["saved_model"])
FLAGS = flags.FLAGS


def _child(mode, path, sentences, threads):
    import time

    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    import tensorflow_text  # noqa: F401  registers the SentencePiece ops

    def timed(function, *args, **kwargs):
        start = time.perf_counter()
        function(*args, **kwargs)
        return time.perf_counter() - start

    result = {"mode": mode}
    start = time.perf_counter()
    serve = tf.saved_model.load(path).signatures["serving_default"]
    result["load_s"] = time.perf_counter() - start
    warmup = os.path.join(path, "assets.extra", "tf_serving_warmup_requests")
    result["warmup_s"] = 0.0
    if mode == "warm":
        from tensorflow_serving.apis import prediction_log_pb2

        for record in tf.data.TFRecordDataset(warmup).as_numpy_iterator():
            request = prediction_log_pb2.PredictionLog.FromString(
                record
            ).predict_log.request
            result["warmup_s"] += timed(
                serve, inputs=tf.constant(tf.make_ndarray(request.inputs["inputs"]))
            )
    first, rest = sentences[: FLAGS.first_batch], sentences[FLAGS.first_batch :]
    result["first_request_s"] = timed(serve, inputs=tf.constant(first))
    latencies = [timed(serve, inputs=tf.constant([s])) for s in rest[: FLAGS.requests]]
    result["single_p50_ms"] = 1000 * float(np.percentile(latencies, 50))
    result["single_p95_ms"] = 1000 * float(np.percentile(latencies, 95))
    return result


def main(argv):
    del argv
    from t2t_repro.data.text_files import read_lines

    sentences = read_lines(FLAGS.input)[: FLAGS.first_batch + FLAGS.requests]
    threads = intra_op_threads(FLAGS.saved_model)
    if FLAGS.child:
        print(json.dumps(_child(FLAGS.child, FLAGS.saved_model, sentences, threads)))
        return
    from bench_matmul import cpu_description, describe_cpu, matmul_ceiling

    ceiling = matmul_ceiling(sizes=(2048,))
    results = []
    for mode in ("cold", "warm"):
        child = subprocess.run(
            [sys.executable, __file__, *sys.argv[1:], f"--child={mode}"],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        )
        results.append(json.loads(child.stdout.splitlines()[-1]))
    print(describe_cpu())
    print(
        f"{FLAGS.saved_model}: first request of {FLAGS.first_batch} "
        f"sentences, then {FLAGS.requests} single sentences, "
        f"{threads or 'default'} intra-op threads; matmul "
        f"2048^3 fp32 {ceiling['float32'][2048]} GFLOP/s"
    )
    print("mode   load s   warm-up s   first request s   single p50 ms   single p95 ms")
    for r in results:
        print(
            f"{r['mode']:5} {r['load_s']:8.2f} {r['warmup_s']:11.2f} "
            f"{r['first_request_s']:17.2f} {r['single_p50_ms']:15.1f} "
            f"{r['single_p95_ms']:15.1f}"
        )
    if FLAGS.json:
        with open(FLAGS.json, "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "cpu": cpu_description(),
                    "results": results,
                    "intra_op_threads": threads,
                    "matmul_gflops": ceiling,
                },
                handle,
                indent=1,
            )


if __name__ == "__main__":
    app.run(main)
