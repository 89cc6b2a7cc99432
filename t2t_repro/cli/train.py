r"""t2t-train: train a Transformer from the command line.

    t2t-train --flagfile=flags/multi30k.cfg --model_dir=runs/multi30k
    t2t-train --flagfile=flags/quickstart.cfg --model_dir=runs/mine \
        --train_src=train.en --train_tgt=train.pt \
        --dev_src=dev.en --dev_tgt=dev.pt --target_lang=pt

Every hyper-parameter is a flag; `--flagfile=flags/...` gives the presets
(a recipe, and for Multi30k a data flagfile from flags/data/). Every data
file given is checked before training starts.
Re-running the same command on an existing model_dir resumes it.
`--init_from=RUN_DIR` fine-tunes: a new run starts from another run's
weights and vocabulary (docs/fine_tuning.md).
"""

import sys

from absl import flags, logging

from t2t_repro.cli import common
from t2t_repro.cli.flags import (
    SPLITS,
    corpus_from_flags,
    decoding_from_flags,
    define_training_flags,
    model_config_from_flags,
    model_differences,
    model_flags_given,
    settings_from_flags,
)
from t2t_repro.config import ConfigError, TrainingOptions
from t2t_repro.data import DataError

define_training_flags()
flags.mark_flag_as_required("model_dir")
FLAGS = flags.FLAGS


def vocabulary_trainer(corpus):
    """A function returning a SentencePiece model of the flags' size and
    type, learned on `corpus`."""
    from t2t_repro.data import vocabulary

    def train():
        sentences = corpus.sentences(FLAGS.vocab_sample_pairs)
        logging.info(
            "training a %d-piece %s SentencePiece model on %d sentences",
            FLAGS.vocab_size,
            FLAGS.spm_model_type,
            len(sentences),
        )
        return vocabulary.train_sentencepiece(
            sentences,
            FLAGS.vocab_size,
            model_type=FLAGS.spm_model_type,
            seed=FLAGS.seed,
        )

    return train


def fine_tuning_start(run_dir):
    """(the run whose config.json and spm.model this run takes, the
    checkpoint --init_from names): --init_from's, or `run_dir` and None if
    it has checkpoints (it resumes from them). Either way a model flag that
    differs from that run's config.json is refused."""
    from t2t_repro import fine_tuning
    from t2t_repro.checkpoints import latest_checkpoint
    from t2t_repro.run_dir import CONFIG_FILENAME

    if latest_checkpoint(run_dir.path):
        logging.warning(
            "--init_from ignored: %s has checkpoints, resuming from them", run_dir.path
        )
        model_run, checkpoint = run_dir, None
    else:
        model_run, checkpoint = fine_tuning.source_of(FLAGS.init_from)
        if FLAGS.init_optimizer_slots:
            fine_tuning.check_has_optimizer_slots(FLAGS.init_from, checkpoint)
    given = model_flags_given()
    # The size of a SentencePiece model to learn: none is.
    given.pop("vocab_size", None)
    differences = model_differences(given, model_run.load_config())
    if differences:
        raise ConfigError(
            f"--init_from: the model differs from "
            f"{model_run.file(CONFIG_FILENAME)}: "
            f"{differences}"
        )
    return model_run, checkpoint


def main():
    with common.startup_log_held() as startup_log:
        train_from_flags(startup_log)


def train_from_flags(startup_log):
    from t2t_repro import fine_tuning
    from t2t_repro.averaging import average_of_last
    from t2t_repro.checkpoints import checkpoint_step, load_model
    from t2t_repro.data import pipeline, vocabulary
    from t2t_repro.run_dir import RunDir
    from t2t_repro.training import distribution
    from t2t_repro.training.evaluator import DevEvaluator
    from t2t_repro.training.prepare import hold_run_lock, prepare_run

    if distribution.is_evaluator():
        logging.warning(
            "TF_CONFIG makes this task the cluster's evaluator, which has "
            "nothing to do: the chief and workers evaluate on dev as they "
            "train (the run's dev/ events; t2t-eval scores any checkpoint)"
        )
        return
    train_corpus, dev_corpus, test_corpus = map(corpus_from_flags, SPLITS)
    if train_corpus is None:
        raise DataError("give --train_src/--train_tgt or --tfds_name")
    for corpus in (train_corpus, dev_corpus, test_corpus):
        if corpus is not None:
            corpus.check_files()
    strategy = distribution.make_strategy(FLAGS.cpu_devices, FLAGS.collective_timeout)
    logging.info(
        "%d replica(s) with %s", strategy.num_replicas_in_sync, type(strategy).__name__
    )
    train_pairs = train_corpus.pairs()
    dev_pairs = dev_corpus.pairs() if dev_corpus else None
    if dev_corpus is None and (FLAGS.keep_best or FLAGS.patience):
        raise DataError(
            "--keep_best and --patience rank checkpoints by "
            "dev BLEU: give --dev_src/--dev_tgt or --tfds_name"
        )
    run_dir = RunDir(FLAGS.model_dir)
    # Held from before the vocabulary is learnt until training ends (the
    # trainer lets go of it).
    with hold_run_lock(run_dir.path, strategy) as lock:
        init_checkpoint = None
        if FLAGS.init_from:
            # The source's model and vocabulary, which prepare_run writes.
            model_run, init_checkpoint = fine_tuning_start(run_dir)
            model_config, proto = model_run.load_config_and_vocabulary()
        else:
            model_config_from_flags()  # an impossible model fails first
            proto = run_dir.existing_or_new_vocabulary(
                vocabulary_trainer(train_corpus),
                distribution.is_chief(strategy),
            )
            model_config = model_config_from_flags(
                vocab_size=vocabulary.vocab_size_of(proto)
            )
        pipeline.check_lengths(
            train_pairs,
            vocabulary.make_tokenizer(proto),
            model_config.max_length,
            FLAGS.overlong,
            train_corpus.trees_path or train_corpus.source_path or FLAGS.tfds_name,
        )
        options = settings_from_flags(TrainingOptions)
        evaluator = (
            None
            if dev_pairs is None
            else DevEvaluator(
                dev_pairs,
                proto,
                model_config.max_length,
                options,
                decoding_from_flags(),
                parsing=bool(dev_corpus.trees_path),
                target_lang=dev_corpus.target_lang,
            )
        )
        with distribution.lost_peers_named(strategy):
            trainer = prepare_run(
                model_config,
                options,
                strategy,
                proto,
                train_pairs,
                evaluator,
                data_sources={"train": train_corpus, "dev": dev_corpus},
                lock=lock,
                task_facts={
                    "--init_from": init_checkpoint
                    and fine_tuning.checkpoint_identity(init_checkpoint),
                    "--init_optimizer_slots": FLAGS.init_optimizer_slots,
                },
            )
            if init_checkpoint:
                fine_tuning.initialize(
                    trainer, init_checkpoint, FLAGS.init_optimizer_slots
                )
        startup_log.release()
        trainer.train()
    if trainer.interrupted_by is not None:
        # A scheduler must see that the run did not finish.
        logging.warning(
            "stopped by %s at step %d, checkpoint saved; the same command resumes",
            "another worker's signal"
            if trainer.stopped_by_peer
            else f"signal {trainer.interrupted_by}",
            trainer.step,
        )
        sys.exit(128 + trainer.interrupted_by)
    if test_corpus is not None and trainer.is_chief:
        from t2t_repro.evaluation import format_scores, score_corpus

        model, described = trainer.model, f"step {trainer.step}"
        if FLAGS.average_last > 1:
            average, paths = average_of_last(run_dir.path, FLAGS.average_last)
            model, _, _ = load_model(average)
            steps = ", ".join(str(checkpoint_step(p)) for p in paths)
            described = f"average of steps {steps} in {average}"
        decoding = decoding_from_flags()
        _, _, scores = score_corpus(
            model,
            vocabulary.make_tokenizer(proto),
            test_corpus,
            decoding,
            progress=True,
        )
        print(
            f"test: {test_corpus.name}, "
            f"{scores['sentences']} sentences, beam {decoding.beam_size}, "
            f"alpha {decoding.alpha}, {described}"
        )
        print(format_scores(scores))


def run():
    common.run(main)


if __name__ == "__main__":  # python -m t2t_repro.cli.train
    run()
