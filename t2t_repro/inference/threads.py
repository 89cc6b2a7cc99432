"""How many threads one op of a decoding process may use."""

import os

import tensorflow as tf
from absl import logging


def cores():
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def threads_per_search(parallel_searches, threads=0):
    """Each side-by-side search's share of `threads` (0: the cores). A
    decoding step's ops are small: split over more threads than that, the
    two searches' ops contend for the same cores and wait on each other."""
    return max(1, (threads or cores()) // parallel_searches)


def use_decoding_threads(decoding):
    """Limits each op of this process to `threads_per_search` threads, for
    `decoding` (`DecodingOptions`); TF_NUM_INTRAOP_THREADS, if set, wins.
    An XLA-compiled decoder (`jit_compile`) keeps TensorFlow's default:
    limited to one thread per op, it ran far slower than with it
    (docs/performance.md). Call before TensorFlow runs its first op."""
    if os.environ.get("TF_NUM_INTRAOP_THREADS"):
        logging.debug("decoding threads per op: TF_NUM_INTRAOP_THREADS")
    elif decoding.jit_compile:
        logging.debug("decoding threads per op: TensorFlow's default (XLA)")
    else:
        threads = threads_per_search(decoding.parallel_searches)
        logging.debug(
            "decoding threads per op: %d (%d searches side by side)",
            threads,
            decoding.parallel_searches,
        )
        tf.config.threading.set_intra_op_parallelism_threads(threads)
