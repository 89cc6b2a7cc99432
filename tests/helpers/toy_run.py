"""A tiny German->English run on four phrases, trained by the real Trainer."""

import dataclasses

import tensorflow as tf

from helpers.vocab_for_tests import tiny_vocab
from t2t_repro.config import TrainingOptions, TransformerConfig
from t2t_repro.data.vocabulary import vocab_size_of
from t2t_repro.training.evaluator import DevEvaluator
from t2t_repro.training.prepare import prepare_run

SMALL = TransformerConfig(
    vocab_size=vocab_size_of(tiny_vocab()),
    d_model=16,
    num_heads=2,
    d_ff=32,
    num_encoder_layers=1,
    num_decoder_layers=1,
    dropout=0.1,
    attention_dropout=0.1,
    max_length=32,
)

# Small enough to train in seconds, yet to translate the phrases exactly.
LEARNABLE = dataclasses.replace(
    SMALL, d_model=32, d_ff=64, dropout=0.0, attention_dropout=0.0
)
PHRASES = [
    "ein hund läuft",
    "a dog runs",
    "eine katze",
    "a cat",
    "der mann",
    "the man",
    "das gras",
    "the grass",
]


def toy_pairs():
    sources = [f"{PHRASES[(i * 2) % 8]} {PHRASES[(i * 3 + 2) % 8]}" for i in range(64)]
    targets = [
        f"{PHRASES[(i * 2 + 1) % 8]} {PHRASES[(i * 3 + 3) % 8]}" for i in range(64)
    ]
    return tf.data.Dataset.from_tensor_slices((sources, targets))


def toy_trainer(
    model_dir, steps, config=SMALL, dev_pairs=None, strategy=None, **overrides
):
    """A Trainer on the toy pairs; `overrides` set TrainingOptions fields,
    `dev_pairs` gives it a DevEvaluator; one-device MirroredStrategy
    unless `strategy`."""
    options = TrainingOptions(
        **{
            "model_dir": str(model_dir),
            "train_steps": steps,
            "batch_tokens": 128,
            "warmup_steps": 5,
            "checkpoint_every": 5,
            "log_every": 5,
            "eval_every": 1000,
            "shuffle_buffer": 64,
            "seed": 3,
            "mixed_precision": "fp32",
            **overrides,
        }
    )
    evaluator = (
        None
        if dev_pairs is None
        else DevEvaluator(dev_pairs, tiny_vocab(), config.max_length, options)
    )
    return prepare_run(
        config,
        options,
        strategy or tf.distribute.MirroredStrategy(),
        tiny_vocab(),
        toy_pairs(),
        evaluator,
    )


# Steps of the learnable run. At a learning-rate scale of 0.3 it learns
# every training pair with a log-probability margin of at least 3 nats over
# the runner-up token, on five seeds tried (at scale 1.0 and 150 steps the
# margin was negative on some seeds: which phrases it got right depended on
# the machine's float rounding). test_trainer.py checks the margin.
LEARNABLE_STEPS = 200


def train_learnable_run(model_dir):
    """LEARNABLE_STEPS steps of LEARNABLE, checkpoints every 25 steps."""
    trainer = toy_trainer(
        model_dir,
        LEARNABLE_STEPS,
        config=LEARNABLE,
        batch_tokens=256,
        warmup_steps=20,
        learning_rate_scale=0.3,
        checkpoint_every=25,
    )
    trainer.train()
    return trainer


def learnable_run_evaluator(run_dir, dev_pairs, model_dir):
    """(model, DevEvaluator on `dev_pairs`) of a `train_learnable_run`
    directory, the evaluator bound to the model by one translation of
    `dev_pairs` (as an evaluation starts)."""
    from t2t_repro.checkpoints import load_model

    model, proto, _ = load_model(run_dir)
    evaluator = DevEvaluator(
        dev_pairs, proto, LEARNABLE.max_length, TrainingOptions(model_dir=model_dir)
    )
    evaluator.translations(model)
    return model, evaluator
