"""t2t-translate: translate a file or stdin, one sentence per line.

    t2t-translate --model_dir=runs/multi30k --input=src.en --output=out.de
    echo "A dog runs." | t2t-translate --saved_model=exports/multi30k/800
    t2t-translate --ctranslate2=exports/multi30k-ct2 < src.en

Uses a run's checkpoint (`--model_dir`, optionally `--checkpoint`), an
exported SavedModel (`--saved_model`) or a CTranslate2 export
(`--ctranslate2`, the `[ct2]` extra; beam search rescored with our length
penalty). Sentences are batched by length and
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
flags.DEFINE_string("ctranslate2", None, "A t2t-export --format=ctranslate2 "
                    "directory, instead of --model_dir.")
flags.DEFINE_integer("threads", 0, "CPU threads for --ctranslate2 (0: its "
                     "default).", lower_bound=0)
flags.DEFINE_string("input", "-", "Source sentences, one per line (.gz "
                    "too); - for stdin.")
flags.DEFINE_string("output", "-", "Where to write translations; - for "
                    "stdout.")
define_decoding_flags()
flags.DEFINE_bool("progress", True, "Show progress on stderr.")
flags.register_multi_flags_validator(
    ["model_dir", "saved_model", "ctranslate2"],
    lambda f: sum(f[name] is not None for name in f) == 1,
    message="give exactly one of --model_dir, --saved_model and "
    "--ctranslate2")

FLAGS = flags.FLAGS


def make_translator():
    from t2t_repro.checkpoints import RunDir
    from t2t_repro.data.vocabulary import make_tokenizer
    from t2t_repro.inference import SavedModelTranslator, Translator

    if FLAGS.saved_model:
        return SavedModelTranslator(FLAGS.saved_model, decoding_from_flags())
    if FLAGS.ctranslate2:
        from t2t_repro.ct2 import CTranslate2Translator

        return CTranslate2Translator(FLAGS.ctranslate2, decoding_from_flags(),
                                     FLAGS.threads)
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

