"""The dev-BLEU history of a run and its best checkpoints (model_dir/best).

`best/scores.json` holds every dev evaluation, the kept checkpoints with
their scores, and whether early stopping ended the run. Checkpoint files
are written before the JSON that names them and deleted after it no longer
does, and the JSON is replaced atomically, so a kill at any moment leaves a
consistent record (at worst an unnamed file). The checkpoints it names are
files of best/, which it deletes when they drop out: a record naming
anything else is refused, lest a damaged or edited one delete files
outside it.
"""

import json
import math
import os

import tensorflow as tf
from absl import logging

from t2t_repro.config import ConfigError
from t2t_repro.files import read_json_object, write_atomically
from t2t_repro.run_dir import BEST_DIRNAME, CHECKPOINT_NAME, SCORES_FILENAME


def _checkpoint_files(prefix):
    return tf.io.gfile.glob(prefix + ".index") + tf.io.gfile.glob(prefix + ".data-*")


class BestCheckpoints:
    """Keeps the `keep` checkpoints with the highest dev BLEU.

    Args:
        model_dir: the run directory; files go to `model_dir/best/`.
        keep: how many to keep (0 keeps none, but the history is recorded).
        checkpoint: a `tf.train.Checkpoint` of the model's variables, or
            None to only read the record.
        read_only: write and delete nothing, keeping the record in memory
            from the one read (another task's, the chief's).
    """

    def __init__(self, model_dir, keep=0, checkpoint=None, read_only=False):
        self.directory = os.path.join(model_dir, BEST_DIRNAME)
        self.keep = 0 if read_only else keep
        self.checkpoint = checkpoint
        self.read_only = read_only
        self._path = os.path.join(self.directory, SCORES_FILENAME)
        self.state = {"evaluations": [], "best": [], "stopped_early_at": None}
        if tf.io.gfile.exists(self._path):
            self.state = self._checked(read_json_object(self._path))

    def _checked(self, state):
        """`state`, read from scores.json; ConfigError unless it has the
        record's shape and names checkpoints of best/ only."""
        evaluations, best = state.get("evaluations"), state.get("best")
        if not (
            "stopped_early_at" in state
            and isinstance(evaluations, list)
            and isinstance(best, list)
            and all(
                isinstance(entry, dict)
                and isinstance(entry.get("step"), int)
                and isinstance(entry.get("bleu"), (int, float))
                for entry in evaluations + best
            )
            and all(isinstance(entry.get("path"), str) for entry in best)
        ):
            raise ConfigError(
                f"{self._path}: corrupt (not a record of dev "
                "evaluations and best checkpoints)"
            )
        directory = os.path.normpath(self.directory)
        for entry in state["best"]:
            where = os.path.normpath(os.path.join(directory, entry["path"]))
            if os.path.dirname(where) != directory:
                raise ConfigError(
                    f"{self._path}: names checkpoint {entry['path']!r}, "
                    f"outside {self.directory}"
                )
        return state

    @property
    def evaluations(self):
        """[{"step": int, "bleu": float, "minutes": float}] in step order."""
        return self.state["evaluations"]

    @property
    def best(self):
        """[{"step", "bleu", "path"}], highest BLEU first."""
        return self.state["best"]

    @property
    def stopped_early_at(self):
        return self.state["stopped_early_at"]

    def _save_state(self):
        if not self.read_only:
            write_atomically(self._path, json.dumps(self.state, indent=2))

    def _delete(self, prefix):
        if self.read_only:
            return
        for path in _checkpoint_files(prefix):
            tf.io.gfile.remove(path)

    def forget_after(self, step):
        """Drops what was recorded after `step`: a run resumed from an
        earlier checkpoint evaluates those steps again."""
        later = [e for e in self.best if e["step"] > step]
        if not later and all(e["step"] <= step for e in self.evaluations):
            return
        self.state["evaluations"] = [e for e in self.evaluations if e["step"] <= step]
        self.state["best"] = [e for e in self.best if e["step"] <= step]
        if (self.stopped_early_at or 0) > step:
            self.state["stopped_early_at"] = None
        self._save_state()
        for entry in later:
            self._delete(os.path.join(self.directory, entry["path"]))

    def record(self, step, bleu, minutes):
        """Records an evaluation; saves the model if it is among the best.

        Returns True if the checkpoint was kept.
        """
        self.evaluations.append({"step": step, "bleu": bleu, "minutes": minutes})
        kept = self.keep > 0 and (
            len(self.best) < self.keep or _rank(bleu) > _rank(self.best[-1]["bleu"])
        )
        evicted = []
        if kept:
            name = f"{CHECKPOINT_NAME}-{step}"
            # Created on first use; restoring asserts every object matched,
            # so it must be in the file as in `save()`'s.
            self.checkpoint.save_counter.assign_add(1)
            self.checkpoint.write(os.path.join(self.directory, name))
            self.best.append({"step": step, "bleu": bleu, "path": name})
            # Ties keep the earlier checkpoint first.
            self.best.sort(key=lambda e: (-_rank(e["bleu"]), e["step"]))
            evicted = self.best[self.keep :]
            del self.best[self.keep :]
        self._save_state()
        for entry in evicted:
            self._delete(os.path.join(self.directory, entry["path"]))
        if kept:
            logging.info(
                "kept %s (dev BLEU %.2f) among the best %d",
                os.path.join(self.directory, name),
                bleu,
                self.keep,
            )
        return kept

    def evaluations_since_best(self):
        """Evaluations after the one with the highest BLEU (the first of
        equals)."""
        scores = [_rank(e["bleu"]) for e in self.evaluations]
        if not scores:
            return 0
        return len(scores) - 1 - scores.index(max(scores))

    def stop_early(self, step):
        self.state["stopped_early_at"] = step
        self._save_state()

    def best_paths(self, count):
        """Paths of the `count` best kept checkpoints, best first."""
        if len(self.best) < count:
            raise ConfigError(
                f"{self.directory}: holds {len(self.best)} best "
                f"checkpoint(s), cannot average {count}; train with "
                f"--keep_best={count} or more"
            )
        return [os.path.join(self.directory, e["path"]) for e in self.best[:count]]


def _rank(bleu):
    """`bleu` for comparisons: a NaN or infinite one (a broken scorer or
    model) ranks below every real score instead of scrambling the order."""
    return bleu if math.isfinite(bleu) else -math.inf
