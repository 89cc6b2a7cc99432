"""The training metrics between two log lines: accumulated from the
compiled step's outputs without host syncs, then logged and written to
TensorBoard."""

import time

import numpy as np
import tensorflow as tf
from absl import logging


class IntervalMetrics:
    """Step outputs (dicts of summed tensors: loss_sum, target_tokens,
    correct, real_tokens, padded_tokens, grad_norm, nonfinite) since the
    last log."""

    def __init__(self):
        self.outputs = []
        self.start = time.perf_counter()

    def add(self, step_outputs):
        self.outputs.append(step_outputs)

    def __len__(self):
        return len(self.outputs)

    def summary(self, learning_rate):
        """The logged metrics, per target token, step or second."""
        totals = {name: float(np.sum([o[name].numpy()
                                      for o in self.outputs]))
                  for name in self.outputs[0]}
        seconds = time.perf_counter() - self.start
        steps = len(self.outputs)
        targets = max(totals["target_tokens"], 1.0)
        return {
            "loss": totals["loss_sum"] / targets,
            "accuracy": totals["correct"] / targets,
            "learning_rate": learning_rate,
            "grad_norm": totals["grad_norm"] / steps,
            "tokens_per_second": totals["real_tokens"] / seconds,
            "padding_efficiency":
                totals["real_tokens"] / max(totals["padded_tokens"], 1.0),
            "seconds_per_step": seconds / steps,
            "nonfinite_steps": totals["nonfinite"],
        }


def write_metrics(metrics, step, writer):
    """To TensorBoard (`writer`) and one log line."""
    with writer.as_default(step=step):
        for name, value in metrics.items():
            tf.summary.scalar(name, value)
    logging.info(
        "step %d loss %.4f acc %.3f lr %.3g |g| %.3f %.0f tok/s "
        "pad-eff %.2f %.3f s/step", step, metrics["loss"],
        metrics["accuracy"], metrics["learning_rate"], metrics["grad_norm"],
        metrics["tokens_per_second"], metrics["padding_efficiency"],
        metrics["seconds_per_step"])
