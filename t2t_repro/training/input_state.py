"""The resumable input: each worker's stream of training batches, saved
with every checkpoint so that a resume continues it where it stopped, and
the record (training.json) that refuses a resume on another data order.

Each worker reads one plain tf.data pipeline (tf.distribute's own
iterators cannot be saved). The chief saves its iterator, shuffle buffer
included, in the model checkpoint; every other worker saves its own
beside it under `input/worker-K/`. So a resume costs the same at any step.
With checkpoints that hold no input state, the deterministic pipeline is
rebuilt and replays the batches already consumed, so a resumed run
follows the same trajectory as an uninterrupted one either way; after a
data-order change that was allowed, the rebuilt pipeline follows the new
options and skips the step times its batches per step.
"""

import dataclasses
import itertools
import os

import tensorflow as tf
from absl import logging

from t2t_repro.checkpoints import checkpoint_manager, holds
from t2t_repro.config import DATA_ORDER_OPTIONS, ConfigError
from t2t_repro.data import pipeline
from t2t_repro.files import sha256_of
from t2t_repro.run_dir import (
    TRAINING_OPTIONS_FILENAME,
    WORKER_INPUT_DIRNAME,
    WORKER_INPUT_PREFIX,
)


def training_dataset(pairs, tokenizer, options, max_length, input_context):
    """One input pipeline's batches of `pairs`, from the start of the
    stream: its shard of the pairs, batched to its replicas' share of
    `options.batch_tokens`."""
    if input_context.num_input_pipelines > 1:
        pairs = pairs.shard(
            input_context.num_input_pipelines, input_context.input_pipeline_id
        )
    return pipeline.training_batches(
        pairs,
        tokenizer,
        batch_tokens=max(1, options.batch_tokens // input_context.num_replicas_in_sync),
        max_length=max_length,
        overlong=options.overlong,
        shuffle_buffer=options.shuffle_buffer,
        seed=options.seed,
    )


@tf.function(autograph=False)
def _advance(iterator, count):
    def read_one(index):
        iterator.get_next()
        return index + 1

    tf.while_loop(lambda index: index < count, read_one, [tf.constant(0)])


class InputState:
    """This worker's iterator over its batches of `pairs`, and where its
    state is saved.

    Args:
        pairs: a tf.data.Dataset of (source, target) strings.
        tokenizer: what tokenizes them (sampling, with subword sampling).
        options: the run's `TrainingOptions`.
        max_length: the model's `max_length`.
        input_context: this worker's `tf.distribute.InputContext`.
        checkpoint: the run's model checkpoint, which holds the chief's
            iterator. Another worker's model checkpoints are thrown away:
            it keeps its iterator's under MODEL_DIR/input/worker-K/.
        is_chief: whether this is the chief worker.
        restorable: False when the data order changed (`record_start`):
            the old state does not fit the new pipeline, which replays.
    """

    def __init__(
        self,
        pairs,
        tokenizer,
        options,
        max_length,
        input_context,
        checkpoint,
        is_chief=True,
        restorable=True,
    ):
        self.tokenizer = tokenizer
        # The batches from the start of the stream.
        self.dataset = training_dataset(
            pairs, tokenizer, options, max_length, input_context
        )
        self.iterator = iter(self.dataset)
        # Each step reads accum_steps batches for each of this worker's
        # replicas.
        self.batches_per_step = (
            options.accum_steps
            * input_context.num_replicas_in_sync
            // input_context.num_input_pipelines
        )
        self._checkpoint = checkpoint
        self._manager = None
        if not is_chief:
            self._checkpoint = tf.train.Checkpoint()
            self._manager = checkpoint_manager(
                self._checkpoint,
                os.path.join(
                    options.model_dir,
                    WORKER_INPUT_DIRNAME,
                    f"{WORKER_INPUT_PREFIX}{input_context.input_pipeline_id}",
                ),
                options.keep_checkpoints,
            )
        if restorable:
            # On the chief, before the model checkpoint is restored, which
            # restores the iterator with it.
            self._checkpoint.input = self.iterator

    def next_batches(self):
        """The batches of the next step."""
        return tuple(next(self.iterator) for _ in range(self.batches_per_step))

    def restore(self, restored, step):
        """Brings the iterator to where the run `restored` (a model
        checkpoint, of step `step`) stopped: from its saved state, or by
        replaying the pipeline."""
        saved = restored
        if self._manager is not None:
            saved = os.path.join(self._manager.directory, os.path.basename(restored))
            if not tf.io.gfile.exists(saved + ".index"):
                saved = None
        if saved and hasattr(self._checkpoint, "input") and holds(saved, "input"):
            if self._manager is not None:
                self._checkpoint.restore(saved).assert_existing_objects_matched()
            return
        consumed = step * self.batches_per_step
        logging.info(
            "%s holds no input state: skipping the %d batches already consumed",
            saved or restored,
            consumed,
        )
        # Read and dropped in a graph loop rather than by Dataset.skip,
        # which would make this pipeline's saved state unreadable by the
        # next resume's (skip-free) one.
        _advance(self.iterator, consumed)
        self._checkpoint.input = self.iterator

    def save(self, step):
        """Saves a non-chief worker's iterator state of step `step` (before
        the model checkpoint, which a resume starts from); the chief's goes
        with the model checkpoint."""
        if self._manager is not None:
            self._manager.save(checkpoint_number=step)


# Data identity ----------------------------------------------------------


def data_identity(sources):
    """{split: [identity of each of its files or TFDS split]} of `sources`
    ({split: Corpus or None}; None gives None), for training.json to tell
    whether a resumed run reads the data it started on. A file's identity
    is its path, size and SHA-256, which costs a read of it (once a start);
    a TFDS split's, the builder's name, the split, its version and the
    direction read."""
    if sources is None:
        return None
    identities = {}
    for split, corpus in sources.items():
        if corpus is None:
            continue
        # The sources in Corpus.pairs's order of precedence.
        paths = [
            path
            for path in (corpus.trees_path, corpus.source_path, corpus.target_path)
            if path
        ]
        if paths:
            identities[split] = [
                {
                    "path": path,
                    "size": tf.io.gfile.stat(path).length,
                    "sha256": sha256_of(path),
                }
                for path in paths
            ]
        else:
            import tensorflow_datasets as tfds

            builder = tfds.builder(corpus.tfds_name, data_dir=corpus.tfds_data_dir)
            identities[split] = [
                {
                    "tfds": corpus.tfds_name,
                    "split": corpus.tfds_split,
                    "version": str(builder.version),
                    # Which feature is the source: en-de and de-en read
                    # one split.
                    "direction": f"{corpus.source_lang}-{corpus.target_lang}",
                }
            ]
    return identities


def record_start(run_dir, options, input_context, allow_changes=False, data=None):
    """Writes `run_dir`'s training.json: how the run was last started, the
    options, the replica and worker counts (of `input_context`, a
    `tf.distribute.InputContext`) and `data`, the identity of the data it
    reads (`data_identity`; None keeps the recorded one). Refuses, unless
    `allow_changes`, a resume that changes one of DATA_ORDER_OPTIONS or
    the data; allowed, a data change is a warning. Returns the names of
    what changed."""
    values = {k: v for k, v in dataclasses.asdict(options).items() if k != "model_dir"}
    values["replicas"] = input_context.num_replicas_in_sync
    values["input_pipelines"] = input_context.num_input_pipelines
    previous = run_dir.load_training_options() or {}
    values["data"] = previous.get("data") if data is None else data
    changed = {
        k: (previous[k], values[k])
        for k in DATA_ORDER_OPTIONS
        if k in previous and previous[k] != values[k]
    }
    data_changes = _data_changes(previous.get("data") or {}, values["data"] or {})
    if not allow_changes:
        if changed:
            raise ConfigError(
                f"{run_dir.file(TRAINING_OPTIONS_FILENAME)}: resuming with other "
                "data-order options would not continue the same run; changed "
                f"(old, new): {changed}. Use the original flags, or "
                "--allow_option_changes."
            )
        if data_changes:
            raise ConfigError(
                "; ".join(
                    f"{name} changed since the run started ({details})"
                    for name, details in data_changes
                )
                + ": resuming would misalign the data; pass "
                "--allow_option_changes to resume anyway"
            )
    for name, details in data_changes:
        logging.warning(
            "%s changed since the run started (%s): resuming "
            "anyway (--allow_option_changes), on data an "
            "uninterrupted run did not see",
            name,
            details,
        )
    run_dir.save_training_options(values)
    return sorted(changed) + [name for name, _ in data_changes]


# What zip_longest pairs with a source that one side does not have.
_NO_SOURCE: dict[str, str] = {}


# Keys a data identity gained after runs had recorded theirs.
_LATER_KEYS = ("direction",)


def _data_changes(recorded, current):
    """(name, what changed) of each data source whose identity differs from
    the one `recorded` (see `record_start`). A split on one side only is
    not compared: a dev set given for the first time, or a run recorded
    before data identities were."""
    changes = []
    for split in sorted(recorded.keys() & current.keys()):
        for before, now in itertools.zip_longest(
            recorded[split], current[split], fillvalue=_NO_SOURCE
        ):
            # A moved file is the same data; an identity recorded before
            # it had a key of _LATER_KEYS is not refused for lacking it.
            differing = sorted(
                k
                for k in before.keys() | now.keys()
                if k != "path"
                and (k in before or k not in _LATER_KEYS or before is _NO_SOURCE)
                and before.get(k) != now.get(k)
            )
            if differing:
                source = now or before
                name = source.get("path") or (
                    f"TFDS {source.get('tfds')} split {source.get('split')}"
                )
                changes.append(
                    (
                        name,
                        ", ".join(
                            f"{k} {_shown(k, before.get(k))} -> {_shown(k, now.get(k))}"
                            for k in differing
                        ),
                    )
                )
    return changes


def _shown(key, value):
    # 12 hex digits tell two files apart; 64 would bury the message.
    return value[:12] if key == "sha256" and value else value
