"""t2t-translate: translate a file or stdin, one sentence per line.

    t2t-translate --model_dir=runs/multi30k --input=src.en --output=out.de
    echo "A dog runs." | t2t-translate --saved_model=exports/multi30k/800

Uses a run's checkpoint (`--model_dir`, optionally `--checkpoint`) or an
exported SavedModel (`--saved_model`). Sentences are batched by length and
the output keeps the input's order, one line per input line.
"""

import sys

from absl import flags

from t2t_repro.cli import common
from t2t_repro.cli.flags import (decoding_from_flags, define_checkpoint,
                                 define_decoding_flags)

define_checkpoint()
flags.DEFINE_string("saved_model", None, "A t2t-export version directory, "
                    "instead of --model_dir.")
flags.DEFINE_string("input", "-", "Source sentences, one per line (.gz "
                    "too); - for stdin.")
flags.DEFINE_string("output", "-", "Where to write translations; - for "
                    "stdout.")
define_decoding_flags()
flags.DEFINE_bool("progress", True, "Show progress on stderr.")
flags.register_multi_flags_validator(
    ["model_dir", "saved_model"],
    lambda f: (f["model_dir"] is None) != (f["saved_model"] is None),
    message="give exactly one of --model_dir and --saved_model")

FLAGS = flags.FLAGS


def make_translator():
    from t2t_repro.checkpoints import RunDir
    from t2t_repro.data.vocabulary import make_tokenizer
    from t2t_repro.inference import SavedModelTranslator, Translator

    if FLAGS.saved_model:
        return SavedModelTranslator(FLAGS.saved_model, decoding_from_flags())
    model, proto, _ = RunDir(FLAGS.model_dir).load_model(FLAGS.checkpoint)
    return Translator(model, make_tokenizer(proto), decoding_from_flags())


def main():
    from t2t_repro.data.text_files import STDIN, read_lines

    sentences = read_lines(FLAGS.input)
    translator = make_translator()
    translations = translator.translate(sentences, progress=FLAGS.progress)
    text = "".join(t + "\n" for t in translations)
    if FLAGS.output == STDIN:
        sys.stdout.write(text)
    else:
        with open(FLAGS.output, "w", encoding="utf-8") as handle:
            handle.write(text)


def run():
    common.run(main)

