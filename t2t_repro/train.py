"""t2t-train: train a Transformer from the command line.

    t2t-train --flagfile=flags/multi30k.cfg --model_dir=runs/multi30k

Every hyper-parameter is a flag; `--flagfile=flags/...` gives the presets.
Re-running the same command on an existing model_dir resumes it.
"""

import os
import sys
import time

from absl import app, flags, logging

from t2t_repro import config as config_lib
from t2t_repro.data import DataError, sources
from t2t_repro.training_flags import define_training_flags

define_training_flags()
flags.mark_flag_as_required("model_dir")
FLAGS = flags.FLAGS
_VOCAB_WAIT_SECONDS = 600


def training_options():
    from t2t_repro.precision import resolve_precision
    from t2t_repro.trainer import TrainingOptions

    return TrainingOptions(
        model_dir=FLAGS.model_dir, train_steps=FLAGS.train_steps,
        batch_tokens=FLAGS.batch_tokens, accum_steps=FLAGS.accum_steps,
        label_smoothing=FLAGS.label_smoothing,
        warmup_steps=FLAGS.warmup_steps,
        learning_rate_scale=FLAGS.learning_rate_scale,
        weight_decay=FLAGS.weight_decay,
        subword_sampling=FLAGS.subword_sampling, overlong=FLAGS.overlong,
        shuffle_buffer=FLAGS.shuffle_buffer,
        seed=FLAGS.seed, checkpoint_every=FLAGS.checkpoint_every,
        keep_checkpoints=FLAGS.keep_checkpoints, log_every=FLAGS.log_every,
        eval_every=FLAGS.eval_every,
        dev_bleu_sentences=FLAGS.dev_bleu_sentences,
        keep_best=FLAGS.keep_best, patience=FLAGS.patience,
        jit_compile=FLAGS.jit_compile,
        mixed_precision=resolve_precision(FLAGS.mixed_precision,
                                          FLAGS.model_dir),
        allow_option_changes=FLAGS.allow_option_changes)


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
    from t2t_repro.data import pipeline, vocabulary
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
        if dev_corpus is None and (FLAGS.keep_best or FLAGS.patience):
            raise DataError("--keep_best and --patience rank checkpoints by "
                            "dev BLEU: give --dev_src/--dev_tgt or "
                            "--tfds_name")
        proto = ensure_vocabulary(FLAGS.model_dir, train_corpus,
                                  distribution.is_chief(strategy))
        pipeline.check_a_pair_fits(
            train_pairs, vocabulary.make_tokenizer(proto), FLAGS.max_length,
            FLAGS.overlong, train_corpus.source_path or FLAGS.tfds_name)
    except DataError as error:
        raise app.UsageError(str(error)) from None
    try:
        model_config = config_lib.config_from_flags(
            vocab_size=vocabulary.vocab_size_of(proto))
    except ValueError as error:
        raise app.UsageError(str(error)) from None
    try:
        trainer = Trainer(model_config, training_options(), strategy, proto,
                          train_pairs, dev_pairs)
    except ValueError as error:  # a resume that changes the run
        raise app.UsageError(str(error)) from None
    trainer.train()
    if trainer.interrupted_by is not None:
        # A scheduler must see that the run did not finish.
        logging.warning("stopped by signal %d at step %d, checkpoint saved; "
                        "the same command resumes", trainer.interrupted_by,
                        trainer.step)
        sys.exit(128 + trainer.interrupted_by)
    test_corpus = sources.corpus_from_flags("test")
    if test_corpus is not None and trainer.is_chief:
        from t2t_repro.evaluation import format_scores, score_corpus

        model, described = trainer.model, f"step {trainer.step}"
        if FLAGS.average_last > 1:
            model, described = average_of_last(FLAGS.average_last)
        _, _, scores = score_corpus(model, trainer.tokenizer, test_corpus,
                                    progress=True)
        print(f"test: {test_corpus.source_path or test_corpus.tfds_split}, "
              f"{scores['sentences']} sentences, beam 4, alpha 0.6, "
              f"{described}")
        print(format_scores(scores))


def average_of_last(count):
    """(model, description) of the average of the run's last `count`
    checkpoints, written to MODEL_DIR/average (replaced when older)."""
    import shutil

    import tensorflow as tf

    from t2t_repro.averaging import average_checkpoints, newest_checkpoints
    from t2t_repro.run_files import checkpoint_step, load_trained_model

    paths = newest_checkpoints(FLAGS.model_dir, count)
    output_dir = os.path.join(FLAGS.model_dir, "average")
    existing = tf.train.latest_checkpoint(output_dir)
    if existing is None or checkpoint_step(existing) != checkpoint_step(
            paths[-1]):
        shutil.rmtree(output_dir, ignore_errors=True)
        average_checkpoints(FLAGS.model_dir, output_dir, count)
    model, _, _ = load_trained_model(output_dir)
    steps = ", ".join(str(checkpoint_step(p)) for p in paths)
    return model, f"average of steps {steps} in {output_dir}"


def run():
    app.run(main)


if __name__ == "__main__":
    run()
