"""Training: `prepare_run`, which builds a run's parts and hands them to
the `Trainer` loop (distributed, accumulating, checkpointed, with a
resumable input and a dev `DevEvaluator`), the paper's learning-rate
schedule and Adam, the label-smoothed loss, the choice of tf.distribute
strategy and of the compute precision."""


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. the loss stayed non-finite); the message
    names the step and the last good checkpoint to resume from."""
