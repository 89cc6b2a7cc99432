#!/usr/bin/env python3
r"""Beam search in 1 and in N searches side by side, in one process.

    python scripts/bench_parallel_searches.py --model_dir=runs/multi30k \
        [--searches=2] [--xla] [--beam_size=4] [--rounds=4]

Exports the run's checkpoint twice, with --decode_parallel_searches 1
and --searches (and --decode_jit_compile with --xla), loads both
SavedModels in this process and translates the whole --input with each
in turns, --rounds times (the first round pays for tracing and XLA
compilation), in length-sorted batches of 32 as bench_decode.py does.
Running the two in turns in one process cancels most of the drift that
separate runs of bench_decode.py see on these machines. Each op runs on
--intra_op_threads threads, by default what t2t-translate sets for the B
side (its share of the cores; with --xla, TensorFlow's default), which
handicaps the single search: pass 0 for TensorFlow's default. Prints
sentences/s per round and whether the translations are identical.
"""

import os
import tempfile
import time

from absl import app, flags

flags.DEFINE_string("model_dir", None, "A t2t-train run.")
flags.DEFINE_string(
    "input",
    "data/multi30k/test_2016_flickr.en.gz",
    "Source sentences, one per line (.gz too).",
)
flags.DEFINE_integer("searches", 2, "Searches of the B side.")
flags.DEFINE_bool("xla", False, "Export both with XLA.")
flags.DEFINE_integer("beam_size", 4, "Beam size.")
flags.DEFINE_integer("rounds", 4, "Passes of each side, in turns.")
flags.DEFINE_integer(
    "intra_op_threads",
    None,
    "Threads per op (default: as t2t-translate for --searches; 0: "
    "TensorFlow's default, every core).",
    lower_bound=0,
)
flags.mark_flags_as_required(["model_dir"])
FLAGS = flags.FLAGS


def main(argv):
    del argv
    import tensorflow as tf

    from t2t_repro.config import DecodingOptions
    from t2t_repro.data.text_files import read_lines
    from t2t_repro.inference.threads import use_decoding_threads
    from t2t_repro.serving import export_saved_model

    if FLAGS.intra_op_threads is None:
        use_decoding_threads(
            DecodingOptions(parallel_searches=FLAGS.searches, jit_compile=FLAGS.xla)
        )
    else:
        tf.config.threading.set_intra_op_parallelism_threads(FLAGS.intra_op_threads)
    threads = tf.config.threading.get_intra_op_parallelism_threads()
    from bench_matmul import describe_cpu

    print(describe_cpu())
    print(f"{threads or 'default'} intra-op threads", flush=True)

    sentences = sorted(read_lines(FLAGS.input), key=lambda line: -len(line.split()))
    batches = [sentences[start : start + 32] for start in range(0, len(sentences), 32)]
    serve, outputs = {}, {}
    with tempfile.TemporaryDirectory() as workdir:
        for searches in (1, FLAGS.searches):
            path = export_saved_model(
                FLAGS.model_dir,
                os.path.join(workdir, str(searches)),
                version=1,
                warmup_requests=0,
                decoding=DecodingOptions(
                    beam_size=FLAGS.beam_size,
                    jit_compile=FLAGS.xla,
                    parallel_searches=searches,
                ),
            )
            serve[searches] = tf.saved_model.load(path).signatures["serving_default"]
        for round_ in range(FLAGS.rounds):
            for searches, signature in serve.items():
                start = time.perf_counter()
                outputs[searches] = [
                    signature(inputs=tf.constant(batch))["translations"]
                    .numpy()
                    .tolist()
                    for batch in batches
                ]
                rate = len(sentences) / (time.perf_counter() - start)
                print(
                    f"round {round_} searches {searches}: {rate:.1f} sentences/s",
                    flush=True,
                )
    print("identical translations:", outputs[1] == outputs[FLAGS.searches])


if __name__ == "__main__":
    app.run(main)
