"""Reading a run directory back in tests: a checkpoint's weights and what
the TensorBoard events counted."""

import tensorflow as tf

from t2t_repro.checkpoints import load_model


def checkpoint_weights(run_dir, step):
    """The weights (NumPy) of `run_dir`'s ckpt-`step`."""
    model, _, _ = load_model(str(run_dir), str(run_dir / f"ckpt-{step}"))
    return [w.numpy() for w in model.weights]


def nonfinite_steps_logged(directory):
    """The sum of the `nonfinite_steps` values of the training events."""
    total = 0.0
    for path in tf.io.gfile.glob(str(directory / "train" / "*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == "nonfinite_steps":
                    total += float(tf.make_ndarray(value.tensor))
    return total
