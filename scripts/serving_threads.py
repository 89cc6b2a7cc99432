#!/usr/bin/env python3
"""TF Serving's --tensorflow_intra_op_parallelism for this machine, as
docs/serving.md advises: a search's share of the cores.

    python scripts/serving_threads.py --saved_model=exports/multi30k/950

prints the flag to give the model server. The serving benchmarks
(bench_serving.py, profile_serving.py) import its --intra_op_threads.
"""

from absl import app, flags

flags.DEFINE_integer(
    "intra_op_threads",
    None,
    "Threads per op, as TF Serving's --tensorflow_intra_op_parallelism "
    "(default: a search's share of the cores, as docs/serving.md advises; "
    "0: TensorFlow's default, every core, as for an XLA export).",
    lower_bound=0,
)


def intra_op_threads(saved_model=None, parallel_searches=None):
    """The --intra_op_threads flag's value, by default the share of the
    cores of one of `parallel_searches`: by default the number the export
    at `saved_model` runs (its assets.extra/t2t_decoding.json), else
    DecodingOptions'."""
    from t2t_repro.config import DecodingOptions
    from t2t_repro.inference.exports import translate_decoding
    from t2t_repro.inference.threads import threads_per_search

    if flags.FLAGS.intra_op_threads is not None:
        return flags.FLAGS.intra_op_threads
    if parallel_searches is None:
        decoding = DecodingOptions()
        if saved_model:
            decoding = translate_decoding(saved_model, decoding)
        parallel_searches = decoding.parallel_searches
    return threads_per_search(parallel_searches)


if __name__ == "__main__":
    flags.DEFINE_string(
        "saved_model",
        None,
        "A t2t-export version directory: its --decode_parallel_searches.",
    )
    flags.DEFINE_integer(
        "decode_parallel_searches",
        None,
        "The export's --decode_parallel_searches, for an export written "
        "before it was recorded (default: t2t-export's).",
        lower_bound=1,
    )

    def main(argv):
        del argv
        threads = intra_op_threads(
            flags.FLAGS.saved_model, flags.FLAGS.decode_parallel_searches
        )
        print(f"--tensorflow_intra_op_parallelism={threads}")

    app.run(main)
