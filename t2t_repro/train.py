"""t2t-train: train a Transformer from the command line.

    t2t-train --flagfile=flags/multi30k.cfg --model_dir=runs/multi30k

Every hyper-parameter is a flag; `--flagfile=flags/...` gives the presets.
Re-running the same command on an existing model_dir resumes it.
"""

import os
import time

from absl import app, flags, logging

from t2t_repro import config as config_lib
from t2t_repro.data import DataError, sources

def define_training_flags():
    """Every t2t-train flag (idempotent), so that other tools accept the
    same --flagfile."""
    if "train_steps" in flags.FLAGS:
        return
    config_lib.define_model_flags()
    config_lib.define_recipe_flags()
    sources.define_data_flags()

    flags.DEFINE_string("model_dir", None, "Run directory: checkpoints, "
                        "vocabulary, config and TensorBoard events.")
    flags.DEFINE_integer("train_steps", 100_000,
                         "Optimizer updates to reach.", lower_bound=1)
    flags.DEFINE_integer("batch_tokens", 4096, "Global source+target tokens "
                         "per micro-batch (padded).", lower_bound=2)
    flags.DEFINE_integer("accum_steps", 1, "Micro-batches summed per update.",
                         lower_bound=1)
    flags.DEFINE_enum("overlong", "drop", ["drop", "truncate"],
                      "What to do with pairs longer than --max_length.")
    flags.DEFINE_integer("shuffle_buffer", 100_000,
                         "Sentence-pair shuffle buffer.", lower_bound=1)
    flags.DEFINE_integer("seed", 0, "Seed for initialisation, dropout and "
                         "data order.")
    flags.DEFINE_integer("checkpoint_every", 1000,
                         "Steps between checkpoints.", lower_bound=1)
    flags.DEFINE_integer("keep_checkpoints", 5, "Checkpoints to keep.",
                         lower_bound=1)
    flags.DEFINE_integer("log_every", 100, "Steps between log lines.",
                         lower_bound=1)
    flags.DEFINE_integer("eval_every", 1000, "Steps between dev evaluations.",
                         lower_bound=1)
    flags.DEFINE_integer("dev_bleu_sentences", 1000,
                         "Dev sentences translated for the periodic BLEU.",
                         lower_bound=1)
    flags.DEFINE_integer("vocab_sample_pairs", 2_000_000,
                         "Training pairs read to learn the SentencePiece "
                         "model.", lower_bound=1)
    flags.DEFINE_enum("spm_model_type", "bpe", ["bpe", "unigram"],
                      "SentencePiece model type.")
    flags.DEFINE_bool("jit_compile", False, "XLA-compile the training step.")
    flags.DEFINE_enum("mixed_precision", "none", ["none", "bf16", "fp16"],
                      "Mixed-precision compute dtype.")
    flags.DEFINE_integer("cpu_devices", 1, "Split the CPU into this many "
                         "logical devices and mirror over them.",
                         lower_bound=1)
    flags.mark_flag_as_required("model_dir")


define_training_flags()
FLAGS = flags.FLAGS
_VOCAB_WAIT_SECONDS = 600


def training_options():
    from t2t_repro.trainer import TrainingOptions

    return TrainingOptions(
        model_dir=FLAGS.model_dir, train_steps=FLAGS.train_steps,
        batch_tokens=FLAGS.batch_tokens, accum_steps=FLAGS.accum_steps,
        label_smoothing=FLAGS.label_smoothing,
        warmup_steps=FLAGS.warmup_steps,
        learning_rate_scale=FLAGS.learning_rate_scale,
        overlong=FLAGS.overlong, shuffle_buffer=FLAGS.shuffle_buffer,
        seed=FLAGS.seed, checkpoint_every=FLAGS.checkpoint_every,
        keep_checkpoints=FLAGS.keep_checkpoints, log_every=FLAGS.log_every,
        eval_every=FLAGS.eval_every,
        dev_bleu_sentences=FLAGS.dev_bleu_sentences,
        jit_compile=FLAGS.jit_compile,
        mixed_precision=FLAGS.mixed_precision)


def ensure_vocabulary(model_dir, corpus, is_chief):
    """The run's SentencePiece proto, trained on the chief if missing."""
    from t2t_repro.data import vocabulary
    from t2t_repro.run_files import vocab_path

    path = vocab_path(model_dir)
    if not os.path.exists(path):
        if is_chief:
            os.makedirs(model_dir, exist_ok=True)
            sentences = corpus.sentences(FLAGS.vocab_sample_pairs)
            logging.info("training a %d-piece %s SentencePiece model on %d "
                         "sentences", FLAGS.vocab_size, FLAGS.spm_model_type,
                         len(sentences))
            vocabulary.train_sentencepiece(
                sentences, FLAGS.vocab_size, path,
                model_type=FLAGS.spm_model_type, seed=FLAGS.seed)
        else:
            deadline = time.time() + _VOCAB_WAIT_SECONDS
            while not os.path.exists(path) and time.time() < deadline:
                time.sleep(1)
    return vocabulary.load_sentencepiece(path)


def main(argv):
    del argv
    from t2t_repro import distribution
    from t2t_repro.data import vocabulary
    from t2t_repro.trainer import Trainer

    train_corpus = sources.corpus_from_flags("train")
    if train_corpus is None:
        raise app.UsageError("give --train_src/--train_tgt or --tfds_name")
    strategy = distribution.make_strategy(FLAGS.cpu_devices)
    logging.info("%d replica(s) with %s", strategy.num_replicas_in_sync,
                 type(strategy).__name__)
    try:
        train_pairs = train_corpus.pairs()
        dev_corpus = sources.corpus_from_flags("dev")
        dev_pairs = dev_corpus.pairs() if dev_corpus else None
        proto = ensure_vocabulary(FLAGS.model_dir, train_corpus,
                                  distribution.is_chief(strategy))
    except DataError as error:
        raise app.UsageError(str(error)) from None
    try:
        model_config = config_lib.config_from_flags(
            vocab_size=vocabulary.vocab_size_of(proto))
    except ValueError as error:
        raise app.UsageError(str(error)) from None
    trainer = Trainer(model_config, training_options(), strategy, proto,
                      train_pairs, dev_pairs)
    trainer.train()
    test_corpus = sources.corpus_from_flags("test")
    if test_corpus is not None and trainer.is_chief:
        from t2t_repro.evaluation import format_scores, score_corpus

        _, _, scores = score_corpus(trainer.model, trainer.tokenizer,
                                    test_corpus, progress=True)
        print(f"test: {test_corpus.source_path or test_corpus.tfds_split}, "
              f"{scores['sentences']} sentences, beam 4, alpha 0.6, step "
              f"{trainer.step}")
        print(format_scores(scores))


def run():
    app.run(main)


if __name__ == "__main__":
    run()
