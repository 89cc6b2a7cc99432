#!/usr/bin/env python3
"""TF Serving's --tensorflow_intra_op_parallelism for this machine, as
docs/serving.md advises: a search's share of the cores.

    python scripts/serving_threads.py [--decode_parallel_searches=2]

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


def intra_op_threads(parallel_searches=None):
    """The --intra_op_threads flag's value, by default the share of the
    cores of one of `parallel_searches` (default: DecodingOptions')."""
    from t2t_repro.config import DecodingOptions
    from t2t_repro.inference.threads import threads_per_search

    if flags.FLAGS.intra_op_threads is not None:
        return flags.FLAGS.intra_op_threads
    return threads_per_search(parallel_searches or DecodingOptions().parallel_searches)


if __name__ == "__main__":
    flags.DEFINE_integer(
        "decode_parallel_searches",
        None,
        "The export's --decode_parallel_searches (default: t2t-export's).",
        lower_bound=1,
    )

    def main(argv):
        del argv
        threads = intra_op_threads(flags.FLAGS.decode_parallel_searches)
        print(f"--tensorflow_intra_op_parallelism={threads}")

    app.run(main)
