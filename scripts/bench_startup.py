#!/usr/bin/env python3
r"""Where a tool's start goes: the phases of translating a few sentences
from a run's checkpoint, as `t2t-translate --model_dir` does them, timed
in one fresh process.

    python scripts/bench_startup.py --model_dir=runs/multi30k \
        [--input=data/multi30k/val.en.gz] [--sentences=20] [--calls=3]

Prints, in seconds: `import tensorflow`; `load_model`, split into the
checkpoint's integrity check, constructing the `Transformer` (its
weights) and the rest (the restore); tracing the translation graph's `serve`; its
first call (Grappler and the executor's set-up are most of it) and the
later calls on the same sentences. Then the CPU and the fp32 matmul rate
of the same process, since machines and their speeds differ: compare
figures of one run, or A/B whole tool runs side by side.
"""

import os
import sys
import time

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

flags.DEFINE_string("model_dir", None, "A t2t-train run directory.")
flags.DEFINE_string(
    "input", "data/multi30k/val.en.gz", "Source sentences, one per line (.gz too)."
)
flags.DEFINE_integer("sentences", 20, "How many of --input's first lines.")
flags.DEFINE_integer("calls", 3, "Calls after the first, on the same sentences.")
flags.mark_flag_as_required("model_dir")
FLAGS = flags.FLAGS


class _Clock:
    """Seconds of each named phase, in order."""

    def __init__(self):
        self.phases = []

    def time(self, phase, function, /, *args, **kwargs):
        start = time.perf_counter()
        result = function(*args, **kwargs)
        self.phases.append((phase, time.perf_counter() - start))
        return result


def main(argv):
    del argv
    clock = _Clock()
    tf = clock.time("import tensorflow", __import__, "tensorflow")
    from bench_matmul import describe_cpu, matmul_gflops

    from t2t_repro import checkpoints
    from t2t_repro.config import DecodingOptions
    from t2t_repro.data.text_files import read_lines
    from t2t_repro.data.vocabulary import make_tokenizer
    from t2t_repro.inference.threads import use_decoding_threads
    from t2t_repro.inference.translators import ModelTranslator

    decoding = DecodingOptions()
    use_decoding_threads(decoding)
    sentences = read_lines(FLAGS.input)[: FLAGS.sentences]

    # load_model's parts, timed where it calls them.
    for name, label in (
        ("check_intact", "  checkpoint check"),
        ("Transformer", "  Transformer(config)"),
    ):
        original = getattr(checkpoints, name)

        def timed(*args, _original=original, _label=label, **kwargs):
            return clock.time(_label, _original, *args, **kwargs)

        setattr(checkpoints, name, timed)
    model, proto, _ = clock.time("load_model", checkpoints.load_model, FLAGS.model_dir)
    load, parts = clock.phases.pop(), clock.phases[-2:]
    rest = load[1] - sum(seconds for _, seconds in parts)
    clock.phases[-2:] = [load, *parts, ("  restore and the rest", rest)]
    translator = ModelTranslator(model, make_tokenizer(proto), decoding)
    serve = translator.graph.serve
    clock.time(
        "trace serve", serve.get_concrete_function, tf.TensorSpec([None], tf.string)
    )
    batch = tf.constant(sentences)
    clock.time("first call", serve, batch)
    for number in range(FLAGS.calls):
        clock.time(f"call {number + 2}", serve, batch)

    print(describe_cpu())
    print(
        f"{FLAGS.model_dir}: {len(sentences)} sentences, beam "
        f"{decoding.beam_size}, {decoding.parallel_searches} searches side by "
        f"side; matmul 1024^3 fp32 {matmul_gflops(1024, 'float32'):.1f} GFLOP/s"
    )
    for name, seconds in clock.phases:
        print(f"{name:<24} {seconds:7.2f} s")


if __name__ == "__main__":
    app.run(main)
