r"""t2t-average: average a run's last (or best) N checkpoints into a new
model_dir.

    t2t-average --model_dir=runs/base --output_dir=runs/base-avg5 \
        --num_checkpoints=5 [--select=best]

The paper averages the last 5 (base) or 20 (big) checkpoints. The output
is a model_dir of its own (config, vocabulary, one checkpoint named after
the newest step averaged, with --select=best the best one's) that
t2t-eval, t2t-translate and t2t-export take.
"""

from absl import flags

from t2t_repro.cli import common
from t2t_repro.cli.flags import define_model_dir

define_model_dir()
flags.DEFINE_string("output_dir", None, "New model_dir for the average.")
flags.DEFINE_integer(
    "num_checkpoints", 5, "How many checkpoints to average.", lower_bound=1
)
flags.DEFINE_enum(
    "select",
    "last",
    ["last", "best"],
    "Average the newest "
    "checkpoints, or those with the highest dev BLEU (kept by "
    "t2t-train --keep_best).",
)
flags.mark_flags_as_required(["model_dir", "output_dir"])

FLAGS = flags.FLAGS


def main():
    from t2t_repro.averaging import average_checkpoints

    print(
        average_checkpoints(
            FLAGS.model_dir, FLAGS.output_dir, FLAGS.num_checkpoints, FLAGS.select
        )
    )


def run():
    common.run(main)


if __name__ == "__main__":  # python -m t2t_repro.cli.average
    run()
