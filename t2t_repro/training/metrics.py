"""The training metrics between two log lines: accumulated from the
compiled step's outputs without host syncs, then logged (with the step
count and an ETA) and written to TensorBoard. The bar shown on a terminal
is `t2t_repro.progress.Progress`, which translation shows too."""

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
        totals = {
            name: float(np.sum([o[name].numpy() for o in self.outputs]))
            for name in self.outputs[0]
        }
        seconds = time.perf_counter() - self.start
        steps = len(self.outputs)
        targets = max(totals["target_tokens"], 1.0)
        return {
            "loss": totals["loss_sum"] / targets,
            "accuracy": totals["correct"] / targets,
            "learning_rate": learning_rate,
            "grad_norm": totals["grad_norm"] / steps,
            "tokens_per_second": totals["real_tokens"] / seconds,
            "padding_efficiency": totals["real_tokens"]
            / max(totals["padded_tokens"], 1.0),
            "seconds_per_step": seconds / steps,
            "nonfinite_steps": totals["nonfinite"],
        }


def format_duration(seconds):
    """'45s', '4m12s', '2h05m' or '3d04h': the two largest units."""
    seconds = max(0, round(seconds))
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{seconds:02d}s"
    return f"{seconds}s"


def log_line(metrics, step, train_steps):
    """`metrics` at `step` as one line: the run's progress, the metrics and
    the ETA, the time the remaining steps take at the interval's rate."""
    eta = max(train_steps - step, 0) * metrics["seconds_per_step"]
    return (
        f"step {step}/{train_steps} loss {metrics['loss']:.4f} "
        f"acc {metrics['accuracy']:.3f} lr {metrics['learning_rate']:.3g} "
        f"|g| {metrics['grad_norm']:.3f} "
        f"{metrics['tokens_per_second']:.0f} tok/s "
        f"pad-eff {metrics['padding_efficiency']:.2f} "
        f"{metrics['seconds_per_step']:.3f} s/step "
        f"ETA {format_duration(eta)}"
    )


def write_metrics(metrics, step, train_steps, writer):
    """To TensorBoard (`writer`) and one log line."""
    with writer.as_default(step=step):
        for name, value in metrics.items():
            tf.summary.scalar(name, value)
    logging.info("%s", log_line(metrics, step, train_steps))
