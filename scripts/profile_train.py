#!/usr/bin/env python3
r"""Where a training step spends its time, op type by op type, per precision.

    python scripts/profile_train.py --flagfile=flags/base.cfg \
        [--precisions=fp32,bf16] [--bench_warmup=5] [--bench_steps=3] \
        [--top=30] [--logdir=DIR]

In one process, after an untimed turn of the first precision (as in
bench_train.py: the loss is XLA-compiled once per batch shape, and every
Trainer meets the same batches), for each precision: builds
bench_train.py's Trainer on Multi30k en-de (the flagfile's model and
batch size), runs `--bench_warmup` untimed steps, then records
`--bench_steps` steps with the TensorFlow profiler and sums the host
events of each TensorFlow op type, and those of the XLA-compiled loss
and its gradient as one row. Prints ms per step of each in each
precision, side by side, and any XLA compilations inside the recorded
steps (which would be a shape the warm-up missed, not step time). With
--logdir the traces stay there for TensorBoard's profile plugin.

Op times overlap: the executor runs independent ops side by side on its
inter-op threads, and an op is timed while it waits for a core that
another op's matmul holds, so small ops (casts, elementwise) read higher
than they cost alone. Compare the precisions' columns, not the shares.
"""

import collections
import glob
import os
import re
import sys
import tempfile

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_train  # noqa: E402  (defines --precisions, --bench_warmup...)
from bench_matmul import describe_cpu  # noqa: E402

flags.DEFINE_integer("top", 30, "Op types listed.")
flags.DEFINE_string(
    "logdir", None, "Keep the profiler traces here (default: discarded)."
)
FLAGS = flags.FLAGS

# A TensorFlow op's host event is named "op_name:OpType"; the profiler's
# own events ("ExecutorState::Process", "end: fusion") are not.
_OP_EVENT = re.compile(r"^[^\s:]+:(\w+)$")
_XLA_COMPILE_EVENT = "CpuCompiler::RunBackend"
_XLA_RUN_EVENT = "CpuExecutable::ExecuteAsyncOnStream"
_XLA_ROW = "(XLA: loss and its gradient)"


def op_times(logdir):
    """(microseconds per op type, XLA compilations, their microseconds)
    summed over the host events of the trace in `logdir`."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    micros = collections.Counter()
    compilations, compile_micros = 0, 0.0
    for path in glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True):
        space = xplane_pb2.XSpace()
        with open(path, "rb") as handle:
            space.ParseFromString(handle.read())
        for plane in space.planes:
            if plane.name != "/host:CPU":
                continue
            for line in plane.lines:
                for event in line.events:
                    name = plane.event_metadata[event.metadata_id].name
                    op = _OP_EVENT.match(name)
                    if op:
                        micros[op.group(1)] += event.duration_ps / 1e6
                    elif name == _XLA_RUN_EVENT:
                        micros[_XLA_ROW] += event.duration_ps / 1e6
                    elif name == _XLA_COMPILE_EVENT:
                        compilations += 1
                        compile_micros += event.duration_ps / 1e6
    return micros, compilations, compile_micros


def profile(precision, proto, pairs, directory, strategy):
    """(wall seconds, op_times(...)) of `--bench_steps` recorded steps."""
    import tensorflow as tf

    step = bench_train.compiled_step(
        *bench_train.split_entry(precision),
        proto,
        pairs,
        os.path.join(directory, precision),
        strategy,
    )
    bench_train.run_steps(FLAGS.bench_warmup, *step)
    logdir = os.path.join(FLAGS.logdir or directory, "profile", precision)
    tf.profiler.experimental.start(logdir)
    try:
        seconds, _, _ = bench_train.run_steps(FLAGS.bench_steps, *step)
    finally:
        tf.profiler.experimental.stop()
    return seconds, op_times(logdir)


def main(argv):
    del argv
    from t2t_repro.training import distribution

    strategy = distribution.make_strategy(1)
    results = {}
    with tempfile.TemporaryDirectory() as directory:
        proto, pairs = bench_train.multi30k_vocabulary_and_pairs(directory)
        bench_train.turn(
            FLAGS.precisions[0],
            proto,
            pairs,
            os.path.join(directory, "warm-up"),
            strategy,
        )
        for precision in FLAGS.precisions:
            results[precision] = profile(precision, proto, pairs, directory, strategy)
    per_step = 1e3 * FLAGS.bench_steps  # microseconds -> ms per step
    columns = "".join(f"{p:>12}" for p in results)
    print(describe_cpu())
    print(f"ms per step      {columns}")
    print(
        f"{'wall':16} "
        + "".join(
            f"{1e3 * seconds / FLAGS.bench_steps:12.1f}"
            for seconds, _ in results.values()
        )
    )
    print(
        f"{'summed op time':16} "
        + "".join(
            f"{sum(micros.values()) / per_step:12.1f}"
            for _, (micros, _, _) in results.values()
        )
    )
    print(
        f"{'XLA compiling':16} "
        + "".join(
            f"{seconds / per_step:8.1f} ({count})"
            for _, (_, count, seconds) in results.values()
        )
    )
    everything = collections.Counter()
    for _, (micros, _, _) in results.values():
        everything.update(micros)
    for op, _ in everything.most_common(FLAGS.top):
        print(
            f"{op:32}"
            + "".join(
                f"{micros[op] / per_step:12.1f}"
                for _, (micros, _, _) in results.values()
            )
        )


if __name__ == "__main__":
    app.run(main)
