"""t2t-translate: translate a file or stdin, one sentence per line.

    t2t-translate --model_dir=runs/multi30k --input=src.en --output=out.de
    echo "A dog runs." | t2t-translate --saved_model=exports/multi30k/950
    t2t-translate --ctranslate2=exports/multi30k-ct2 < src.en
    t2t-translate --model_dir=runs/x --input=all.en.gz --output=all.de
    ... --resume            # the same command again after a crash: goes on

Uses a run's checkpoint (`--model_dir`, optionally `--checkpoint`), an
exported SavedModel (`--saved_model`) or a CTranslate2 export
(`--ctranslate2`, the `[ct2]` extra; beam search rescored with our length
penalty; 1-best only).

Streaming: reads --buffer_size lines at a time, translates them in
batches of similar length and appends their translations to --output in
input order, flushed, so memory is bounded by the buffer and a crash
leaves every finished line. `--resume` continues an interrupted run: it
cuts a partial last line (or n-best group) off --output, skips as many
inputs as it holds and appends the rest. Output is UTF-8 whatever the
locale.

Output, one of:
  default         TRANSLATION                        one line per input
  --with_scores   SCORE ||| TRANSLATION              one line per input
  --n_best=K      INDEX ||| TRANSLATION ||| SCORE    K lines per input
With --n_best (K <= --beam_size), INDEX is the input's 0-based line number
and an input's K lines are K different hypotheses (different subword
sequences; two may detokenize alike), best first (K empty ones, score 0,
for an input with nothing to translate); the first is the
translation the default output has. (The Moses n-best format without its
feature field; --with_scores is OpenNMT-tf's.)
SCORE is what beam search ranks by: log P(translation), summed over its
subword tokens and EOS, divided by the length penalty ((5 + length) / 6)
** alpha, length counting EOS (GNMT's; --alpha=0 gives the plain log
probability). Printed with 6 decimals. t2t-score scores given
translations.
"""

import dataclasses
import re

from absl import flags

from t2t_repro.cli import common
from t2t_repro.cli.flags import (
    decoding_from_flags,
    define_checkpoint,
    define_decoding_flags,
    define_precision,
)
from t2t_repro.cli.streaming import (
    NUMBER,
    SCORE_LINE,
    count_lines,
    define_streaming_flags,
    refuse_output_over_inputs,
    refuse_output_over_model,
    resumed_inputs,
    run_stream,
)
from t2t_repro.config import DecodingOptions, flag_name

define_checkpoint()
flags.DEFINE_string(
    "saved_model", None, "A t2t-export version directory, instead of --model_dir."
)
flags.DEFINE_string(
    "ctranslate2",
    None,
    "A t2t-export --format=ctranslate2 directory, instead of --model_dir.",
)
flags.DEFINE_integer(
    "threads", 0, "CPU threads for --ctranslate2 (0: one per core).", lower_bound=0
)
flags.DEFINE_string(
    "input", "-", "Source sentences, one per line (.gz too); - for stdin."
)
define_streaming_flags("Where to write translations; - for stdout.")
flags.DEFINE_integer(
    "n_best",
    1,
    "Write this many hypotheses per input, "
    "best first, with their scores (at most --beam_size; "
    "format above).",
    lower_bound=1,
)
flags.DEFINE_bool("with_scores", False, "Write SCORE ||| TRANSLATION (score above).")
define_decoding_flags()
define_precision()
MODEL_FLAGS = ("model_dir", "saved_model", "ctranslate2")
flags.register_multi_flags_validator(
    list(MODEL_FLAGS),
    lambda f: sum(f[name] is not None for name in f) == 1,
    message="give exactly one of --model_dir, --saved_model and --ctranslate2",
)
flags.register_multi_flags_validator(
    ["n_best", "beam_size"],
    lambda f: f["n_best"] <= f["beam_size"],
    message="--n_best cannot exceed --beam_size: beam search keeps "
    "beam_size hypotheses",
)
flags.register_multi_flags_validator(
    ["n_best", "ctranslate2"],
    lambda f: f["n_best"] == 1 or f["ctranslate2"] is None,
    message="--n_best is for --model_dir and --saved_model; --ctranslate2 "
    "translates 1-best",
)

flags.register_multi_flags_validator(
    ["precision", "model_dir"],
    lambda f: f["precision"] == "fp32" or f["model_dir"] is not None,
    message="--precision is for --model_dir: an export decodes in the "
    "precision it was exported in",
)

FLAGS = flags.FLAGS


def make_translator():
    from t2t_repro.checkpoints import load_model
    from t2t_repro.data.vocabulary import make_tokenizer
    from t2t_repro.decoding.precision import in_precision
    from t2t_repro.inference.translators import ModelTranslator, SavedModelTranslator

    if FLAGS.saved_model:
        return SavedModelTranslator(FLAGS.saved_model, decoding_from_flags())
    if FLAGS.ctranslate2:
        from t2t_repro.ct2 import CTranslate2Translator

        return CTranslate2Translator(
            FLAGS.ctranslate2, decoding_from_flags(), FLAGS.threads
        )
    model, proto, _ = load_model(FLAGS.model_dir, FLAGS.checkpoint)
    return ModelTranslator(
        in_precision(model, FLAGS.precision),
        make_tokenizer(proto),
        decoding_from_flags(),
    )


def output_lines(n_best_lists, first_index):
    """The output lines (format in the module docstring) of the n-best
    lists of consecutive inputs, the first of which is input
    `first_index`."""
    if FLAGS.n_best > 1:
        return [
            f"{first_index + offset} ||| {text} ||| {score:.6f}"
            for offset, n_best in enumerate(n_best_lists)
            for text, score in n_best
        ]
    best = [n_best[0] for n_best in n_best_lists]
    if FLAGS.with_scores:
        return [f"{score:.6f} ||| {text}" for text, score in best]
    return [text for text, _ in best]


_N_BEST_LINE = re.compile(rf"(\d+) \|\|\| .* \|\|\| {NUMBER}")
_SCORED_LINE = re.compile(rf"{NUMBER} \|\|\|(?: |$)")


def output_line_check(n_best, with_scores):
    """`line_fits(text, input_index)` for `resumed_inputs`: whether `text`
    can be a line `output_lines` writes for input `input_index` (0-based)
    with these flags (what --resume may append to). A plain translation
    may look scored by chance, so without --n_best and --with_scores only
    the first line is held to it: that of a scored, n-best or t2t-score
    file cannot pass."""

    def fits(text, input_index):
        listed = _N_BEST_LINE.fullmatch(text)
        if n_best > 1:
            return listed is not None and int(listed.group(1)) == input_index
        scored = _SCORED_LINE.match(text) is not None
        if with_scores:
            return scored
        return input_index > 0 or not (scored or listed or SCORE_LINE.fullmatch(text))

    return fits


def threads_decoding():
    """The `DecodingOptions` this process's threads are sized for."""
    decoding = decoding_from_flags()
    if FLAGS.saved_model is None:
        # XLA decodes only a run's best translations: n-best lists run the
        # graph's decoder.
        return dataclasses.replace(
            decoding, jit_compile=decoding.jit_compile and FLAGS.n_best == 1
        )
    from t2t_repro.inference.exports import translate_decoding

    given = [
        field.name
        for field in dataclasses.fields(DecodingOptions)
        if FLAGS[flag_name(field)].present
    ]
    return translate_decoding(FLAGS.saved_model, decoding, given)


def main():
    from t2t_repro.data.text_files import numbered_lines
    from t2t_repro.inference.batching import warn_truncated
    from t2t_repro.inference.exports import refuse_oversized
    from t2t_repro.inference.threads import use_decoding_threads

    if not FLAGS.ctranslate2:  # which sets its own threads
        use_decoding_threads(threads_decoding())
    # Before the model loads: a bad input fails in a second.
    total = count_lines(FLAGS.input)
    refuse_output_over_inputs(FLAGS.output, {"input": FLAGS.input})
    refuse_output_over_model(
        FLAGS.output,
        {name: FLAGS[name].value for name in MODEL_FLAGS},
    )
    done = resumed_inputs(
        FLAGS.n_best, output_line_check(FLAGS.n_best, FLAGS.with_scores)
    )
    translator = make_translator()

    limit = translator.max_sentence_bytes

    def translate(sentences, first_index, progress):
        refuse_oversized(
            sentences,
            limit,
            name_of=lambda offset: f"{FLAGS.input}:{first_index + offset + 1}",
            export="the export",
        )
        n_best_lists, truncated = translator.translate_n_best(
            sentences, FLAGS.n_best, progress
        )
        return output_lines(n_best_lists, first_index), truncated

    translated, truncated = run_stream(
        (text for _, text in numbered_lines(FLAGS.input)),
        total,
        translate,
        FLAGS.n_best,
        FLAGS.input,
        "translated",
        "sentences",
        done,
    )
    warn_truncated(truncated, translated)


def run():
    common.run(main)


if __name__ == "__main__":  # python -m t2t_repro.cli.translate
    run()
