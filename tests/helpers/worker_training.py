"""Trains the toy run to STEPS steps as one worker of a
MultiWorkerMirroredStrategy (TF_CONFIG), resuming from MODEL_DIR's
checkpoint if there is one; saves the final step and weights.

    TF_CONFIG=... python worker_training.py MODEL_DIR STEPS OUT.npz
"""

import sys

import numpy as np

from t2t_repro.training import distribution
from toy_run import SMALL, toy_trainer


def main(model_dir, steps, out_path):
    trainer = toy_trainer(model_dir, steps, config=SMALL,
                          strategy=distribution.make_strategy(1),
                          checkpoint_every=2)
    trainer.train()
    np.savez(out_path, step=trainer.step,
             **{w.path: w.numpy() for w in trainer.model.weights
                if not w.path.endswith("seed_generator_state")})


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
