"""Trains the toy run to STEPS steps, resuming from MODEL_DIR's checkpoint
if there is one; saves the final step, the number of input batches the
resume replayed, and the weights.

    [TF_CONFIG=...] python worker_training.py OUT.npz MODEL_DIR STEPS \
        [CPU_DEVICES]

Under TF_CONFIG it runs as one worker of a MultiWorkerMirroredStrategy;
otherwise it mirrors over CPU_DEVICES logical CPUs (configured before
TensorFlow starts, hence a process of its own).
"""

import sys

import numpy as np

from helpers.toy_run import SMALL, toy_trainer
from t2t_repro.training import distribution, input_state


def main(out_path, model_dir, steps, cpu_devices=1):
    replayed = []
    advance = input_state._advance
    input_state._advance = lambda iterator, count: (
        replayed.append(count),
        advance(iterator, count),
    )
    trainer = toy_trainer(
        model_dir,
        steps,
        config=SMALL,
        strategy=distribution.make_strategy(cpu_devices),
        checkpoint_every=2,
    )
    trainer.train()
    np.savez(
        out_path,
        step=trainer.step,
        replayed=sum(replayed),
        **{
            w.path: w.numpy()
            for w in trainer.model.weights
            if not w.path.endswith("seed_generator_state")
        },
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *[int(arg) for arg in sys.argv[3:]])
