"""Measures translation throughput of a trained run's decoders.

    python scripts/benchmark_decoding.py --model_dir=runs/multi30k \
        --input=../shared/data/multi30k/test_2016_flickr.en.gz

Translates the same sentences with greedy search and beam search, each
graph-compiled with and without XLA, twice with the same decoder: the
first pass pays for tracing and compilation (what a one-off `t2t-eval`
pays), the second shows the steady state. Prints seconds, sentences/s and
output tokens/s of each.
"""

import time

from absl import app, flags

flags.DEFINE_string("model_dir", None, "A t2t-train run.")
flags.DEFINE_string("input", None, "Source sentences, one per line.")
flags.DEFINE_integer("sentences", 1000, "How many input lines to translate.")
flags.mark_flags_as_required(["model_dir", "input"])
FLAGS = flags.FLAGS


def main(argv):
    del argv
    from t2t_repro.config import DecodingOptions
    from t2t_repro.data.text_files import read_lines
    from t2t_repro.data.vocabulary import make_tokenizer
    from t2t_repro.inference import Translator
    from t2t_repro.checkpoints import RunDir

    model, proto, checkpoint = RunDir(FLAGS.model_dir).load_model()
    tokenizer = make_tokenizer(proto)
    sentences = read_lines(FLAGS.input)[:FLAGS.sentences]
    print(f"{checkpoint}: {len(sentences)} sentences")
    for beam_size in (1, 4):
        for jit_compile in (False, True):
            translator = Translator(model, tokenizer, DecodingOptions(
                beam_size=beam_size, jit_compile=jit_compile))
            for run in ("first", "second"):
                start = time.perf_counter()
                outputs = translator.translate(sentences)
                seconds = time.perf_counter() - start
                pieces = sum(len(ids) for ids in
                             tokenizer.tokenize(outputs).to_list())
                print(f"beam {beam_size} xla {jit_compile!s:5} {run:6} pass: "
                      f"{seconds:6.1f} s, "
                      f"{len(sentences) / seconds:6.1f} sentences/s, "
                      f"{pieces / seconds:7.0f} output tokens/s")


if __name__ == "__main__":
    app.run(main)
