r"""t2t-score: how likely a model finds given translations.

    t2t-score --model_dir=runs/multi30k --src=test.en --tgt=test.de.gz

For each line pair of --src and --tgt (line-aligned, .gz allowed), one
output line of four tab-separated fields:

    LOG_PROB  TOKENS  PER_TOKEN  SCORE

  LOG_PROB   log P(target | source) under the model (its softmax, by
             teacher forcing), summed over the target's subword tokens
             and its EOS: minus the training loss without label smoothing,
             summed over the sentence.
  TOKENS     the target's subword tokens, EOS included.
  PER_TOKEN  LOG_PROB / TOKENS: comparable across lengths.
  SCORE      LOG_PROB / ((5 + TOKENS) / 6) ** alpha, the length-penalised
             score beam search ranks by (t2t-translate --with_scores).
             t2t-translate's scores can be a little higher: its decoders
             never emit PAD or BOS, nor EOS first, and renormalise
             without them.
Numbers have 6 decimals. A side longer than the model's max_length is cut
(keeping EOS) as t2t-translate cuts its inputs, and how many were is
logged. Empty lines are scored too (an empty target is EOS alone).

Filtering a noisy parallel corpus (e.g. crawled data) with a model trained
on clean data: misaligned or wrong pairs get low per-token scores.

    t2t-score --model_dir=runs/clean --src=crawl.en --tgt=crawl.de \
        --output=crawl.scores
    paste crawl.scores crawl.en crawl.de | awk -F'\t' '$3 > -2' \
        | cut -f5- > kept.tsv

(-2 nats per token is an example: look at the scores' distribution first.
Scoring in both directions, with a model of each, catches more: Junczys-
Dowmunt, 2018, "Dual conditional cross-entropy filtering".)

Streaming as t2t-translate: --buffer_size pairs at a time, appended to
--output and flushed; `--resume` goes on after an interrupted run. A batch
holds pairs of similar length, at most --decode_batch_tokens tokens of
its longer side (the logits are that many times the vocabulary size
floats). Uses a run's checkpoint (`--model_dir`, optionally
`--checkpoint`) or a t2t-export SavedModel (`--saved_model`, its `score`
signature).
"""

import dataclasses

from absl import flags

from t2t_repro.cli import common
from t2t_repro.cli import flags as cli_flags
from t2t_repro.cli.streaming import (
    SCORE_LINE,
    define_streaming_flags,
    refuse_output_over_inputs,
    refuse_output_over_model,
    resumed_inputs,
    run_stream,
    same_file,
)
from t2t_repro.config import DecodingOptions

cli_flags.define_checkpoint()
flags.DEFINE_string(
    "saved_model", None, "A t2t-export version directory, instead of --model_dir."
)
flags.DEFINE_string(
    "src",
    None,
    "Source sentences, one per line (.gz allowed; - for stdin).",
    required=True,
)
flags.DEFINE_string(
    "tgt",
    None,
    "Their translations, line-aligned with --src (.gz allowed; - for "
    "stdin, e.g. t2t-translate's output piped in).",
    required=True,
)
define_streaming_flags("Where to write the scores; - for stdout.")
# Of the decoding settings, only those scoring uses.
for _field in dataclasses.fields(DecodingOptions):
    if _field.name in ("alpha", "batch_tokens", "max_batch_sentences"):
        cli_flags._define_setting(_field, show=True)
MODEL_FLAGS = ("model_dir", "saved_model")
flags.register_multi_flags_validator(
    list(MODEL_FLAGS),
    lambda f: sum(f[name] is not None for name in f) == 1,
    message="give exactly one of --model_dir and --saved_model",
)

FLAGS = flags.FLAGS


def make_scorer():
    from t2t_repro.checkpoints import load_model
    from t2t_repro.data.vocabulary import make_tokenizer
    from t2t_repro.inference.scoring import Scorer

    decoding = cli_flags.settings_from_flags(DecodingOptions)
    if FLAGS.saved_model:
        return Scorer.from_saved_model(FLAGS.saved_model, decoding)
    model, proto, _ = load_model(FLAGS.model_dir, FLAGS.checkpoint)
    return Scorer.from_model(model, make_tokenizer(proto), decoding)


def main():
    from t2t_repro.data import DataError
    from t2t_repro.data.text_files import (
        STDIN,
        aligned_lines,
        check_exists,
        is_read_once,
    )
    from t2t_repro.inference.batching import warn_truncated

    # Before the model loads: misaligned files fail in seconds. Stdin or a
    # pipe is read once, so its alignment is checked as it is scored.
    lines = None
    for path in (FLAGS.src, FLAGS.tgt):
        check_exists(path)
    # Two names of one stream would split its lines between them (a regular
    # file behind stdin is read apart, at its own offset, by another name).
    if FLAGS.src == FLAGS.tgt == STDIN or (
        is_read_once(FLAGS.src)
        and is_read_once(FLAGS.tgt)
        and same_file(FLAGS.src, FLAGS.tgt)
    ):
        raise DataError(
            f"--src={FLAGS.src} and --tgt={FLAGS.tgt} are one stream, which "
            "cannot be read as both: give at most one of them as - or a pipe"
        )
    if not (is_read_once(FLAGS.src) or is_read_once(FLAGS.tgt)):
        lines = sum(1 for _ in aligned_lines(FLAGS.src, FLAGS.tgt))
        if not lines:
            raise DataError(f"{FLAGS.src}: empty file: nothing to score")
    refuse_output_over_inputs(FLAGS.output, {"src": FLAGS.src, "tgt": FLAGS.tgt})
    refuse_output_over_model(
        FLAGS.output,
        {name: FLAGS[name].value for name in MODEL_FLAGS},
    )
    done = resumed_inputs(1, lambda text, _: SCORE_LINE.fullmatch(text) is not None)
    scorer = make_scorer()

    def score(pairs, first_index, progress):
        results, truncated = scorer.score(
            [source for source, _ in pairs], [target for _, target in pairs], progress
        )
        return [
            f"{r.log_prob:.6f}\t{r.target_tokens}\t{r.per_token:.6f}\t{r.score:.6f}"
            for r in results
        ], truncated

    pairs = (
        (source, target) for _, source, target in aligned_lines(FLAGS.src, FLAGS.tgt)
    )
    scored, truncated = run_stream(
        pairs,
        lines,
        score,
        1,
        FLAGS.src,
        "scored",
        "pairs",
        done,
    )
    warn_truncated(
        truncated,
        scored,
        "pairs",
        "a cut side is scored on its first max_length tokens",
    )


def run():
    common.run(main)


if __name__ == "__main__":  # python -m t2t_repro.cli.score
    run()
