"""t2t-eval: translate a test set and score it.

    t2t-eval --flagfile=flags/multi30k.cfg --model_dir=runs/multi30k

Reports sacreBLEU with its signature, chrF, the paper's tokenized,
compound-split BLEU and the Multi30k literature's lowercased tokenized BLEU
(both labelled: not sacreBLEU). --target_lang chooses sacreBLEU's tokenizer
(see --sacrebleu_tokenize) and the Moses rules of the tokenized BLEUs;
without it, 13a and Moses' English rules. Writes the hypotheses and a JSON
of the scores to --output_dir, and the scores to TensorBoard under
model_dir/eval at the checkpoint's step.
"""

import json
import operator
import os

from absl import flags, logging

from t2t_repro.cli import common
from t2t_repro.cli.flags import (
    accept_training_flagfiles,
    check_command_line_model_flags,
    corpus_from_flags,
    decoding_from_flags,
    define_checkpoint,
    define_data_flags,
    define_decoding_flags,
    define_precision,
)
from t2t_repro.data import DataError

accept_training_flagfiles()  # the run's --flagfile
define_data_flags(splits=("test",))
define_decoding_flags()
define_precision()
define_checkpoint()
flags.mark_flag_as_required("model_dir")
flags.DEFINE_string(
    "output_dir", None, "Where hypotheses and scores go (default: MODEL_DIR/eval)."
)

FLAGS = flags.FLAGS
# Translation's and parsing's scores (t2t_repro/evaluation.py).
_SUMMARY_SCORES = (
    "sacrebleu",
    "chrf",
    "tokenized_bleu",
    "lc_tok_bleu",
    "bracket_f1",
    "bracket_precision",
    "bracket_recall",
    "exact_match",
)


def write_results(output_dir, name, hypotheses, scores):
    """`name`.hyp (one translation per line) and `name`.json, each whole or
    not at all; says so when they replace the results of other settings
    (a beam size sweep into one directory, say)."""
    from t2t_repro.files import write_atomically

    base = os.path.join(output_dir, name)
    try:
        with open(base + ".json", encoding="utf-8") as handle:
            earlier = json.load(handle)
    except (OSError, ValueError):
        earlier = {}
    settings = [
        key
        for key in ("checkpoint", "test_source", "beam_size", "alpha")
        if key in earlier
    ]
    # A checkpoint named by another path to the same file (a link) is the
    # same one; RUN/ckpt-9 and RUN-average/ckpt-9 are not.
    same = {"checkpoint": lambda a, b: os.path.realpath(a) == os.path.realpath(b)}
    if any(
        not same.get(key, operator.eq)(earlier[key], scores[key]) for key in settings
    ):
        logging.warning(
            "replacing %s.hyp and .json, the results of %s",
            base,
            ", ".join(f"{key} {earlier.get(key)}" for key in settings),
        )
    write_atomically(base + ".hyp", "".join(h + "\n" for h in hypotheses))
    write_atomically(base + ".json", json.dumps(scores, indent=2, ensure_ascii=False))
    return base


def write_summaries(log_dir, step, scores):
    import tensorflow as tf

    with tf.summary.create_file_writer(log_dir).as_default(step=step):
        for key in _SUMMARY_SCORES:
            if key in scores:
                tf.summary.scalar(key, scores[key])
        if "sacrebleu_signature" in scores:
            tf.summary.text("sacrebleu_signature", scores["sacrebleu_signature"])


def main():
    import tensorflow as tf

    from t2t_repro.checkpoints import checkpoint_step, load_model
    from t2t_repro.data.vocabulary import make_tokenizer
    from t2t_repro.decoding.precision import in_precision, resolve_precision
    from t2t_repro.evaluation import format_scores, score_corpus
    from t2t_repro.files import check_writable, file_error_cause
    from t2t_repro.inference.threads import use_decoding_threads
    from t2t_repro.run_dir import CONFIG_FILENAME, EVAL_DIRNAME, RunDir

    use_decoding_threads(decoding_from_flags())
    corpus = corpus_from_flags("test")
    if corpus is None:
        raise DataError("give --test_src/--test_tgt or --tfds_name")
    run_dir = RunDir(FLAGS.model_dir)
    check_command_line_model_flags(run_dir.load_config(), run_dir.file(CONFIG_FILENAME))
    model, proto, checkpoint = load_model(FLAGS.model_dir, FLAGS.checkpoint)
    precision = resolve_precision(FLAGS.precision)
    # A bf16 evaluation of a step is kept apart from the float32 one.
    suffix = "" if precision == "fp32" else f"_{precision}"
    output_dir = FLAGS.output_dir or os.path.join(FLAGS.model_dir, EVAL_DIRNAME)
    summaries_dir: str | None = os.path.join(FLAGS.model_dir, EVAL_DIRNAME + suffix)
    # Written to before the translation: an unwritable --output_dir fails
    # in a second, not after the whole test set. The run's TensorBoard
    # summaries are a side output: a run this user cannot write to is
    # evaluated without them.
    check_writable(output_dir)
    try:
        check_writable(summaries_dir)
    except (OSError, tf.errors.OpError) as error:
        logging.warning(
            "%s: cannot be written (%s): no TensorBoard summaries of this evaluation",
            summaries_dir,
            file_error_cause(error),
        )
        summaries_dir = None
    model = in_precision(model, precision)
    hypotheses, _, scores = score_corpus(
        model, make_tokenizer(proto), corpus, decoding_from_flags(), progress=True
    )
    step = checkpoint_step(checkpoint)
    test_name = os.path.basename(corpus.name)
    scores.update(
        checkpoint=checkpoint,
        step=step,
        test=test_name,
        # Two test sets of one file name (2016/test.de, 2017/test.de) are
        # told apart by it.
        test_source=(
            f"{corpus.tfds_name}:{corpus.tfds_split}"
            if corpus.tfds_name
            else os.path.abspath(corpus.name)
        ),
        beam_size=FLAGS.beam_size,
        alpha=FLAGS.alpha,
        precision=precision,
    )
    base = write_results(
        output_dir, f"{test_name}.step{step}{suffix}", hypotheses, scores
    )
    if summaries_dir is not None:
        write_summaries(summaries_dir, step, scores)
    print(format_scores(scores))
    print(f"hypotheses and scores: {base}.hyp, {base}.json")


def run():
    common.run(main)


if __name__ == "__main__":  # python -m t2t_repro.cli.eval
    run()
