#!/usr/bin/env python3
r"""Collects a finished reference run into one results JSON and a PNG.

    python scripts/reference_report.py --run_dir=runs/X \
        --average_dir=runs/X/average --eval_dir=results/X \
        --output=results/X.json --plot=results/X.png

Reads the run's newest checkpoint (steps, real tokens trained on, training
wall time), its dev-BLEU history (best/scores.json), which checkpoints the
average holds, the t2t-eval JSON of the averaged model, and measures this
machine's matmul ceiling, so that the wall time can be compared across
machines.
"""

import glob
import json
import os
import sys

from absl import app, flags

flags.DEFINE_string("run_dir", None, "The t2t-train run.")
flags.DEFINE_string(
    "average_dir", None, "The average t2t-eval scored (t2t-average's --output_dir)."
)
flags.DEFINE_string("eval_dir", None, "t2t-eval's --output_dir.")
flags.DEFINE_string("output", None, "Results JSON to write.")
flags.DEFINE_string("plot", None, "PNG of dev BLEU against minutes.")
flags.DEFINE_bool(
    "matmul_ceiling",
    True,
    "Measure this machine's fp32 and bf16 matmul rates into the JSON.",
)
flags.mark_flags_as_required(["run_dir", "average_dir", "eval_dir", "output", "plot"])
FLAGS = flags.FLAGS


def checkpoint_counters(run_dir):
    import tensorflow as tf

    checkpoint = tf.train.latest_checkpoint(run_dir)
    if checkpoint is None:
        raise app.UsageError(f"{run_dir}: no checkpoint found")

    def value(name):
        return tf.train.load_variable(
            checkpoint, f"{name}/.ATTRIBUTES/VARIABLE_VALUE"
        ).item()

    return {
        "steps": int(value("global_step")),
        "tokens_seen": int(value("tokens_seen")),
        "train_wall_minutes": round(value("train_seconds") / 60, 1),
    }


def averaged_steps(average_dir):
    """The steps of the checkpoints `average_dir` averages, ascending."""
    from t2t_repro.checkpoints import checkpoint_step
    from t2t_repro.files import read_json_object
    from t2t_repro.run_dir import AVERAGED_FILENAME

    averaged = read_json_object(os.path.join(average_dir, AVERAGED_FILENAME))
    return sorted(checkpoint_step(name) for name in averaged["checkpoints"])


def plot_curve(evaluations, title, path):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(6, 4), dpi=120)
    axes.plot(
        [e["minutes"] for e in evaluations],
        [e["bleu"] for e in evaluations],
        marker=".",
    )
    axes.set_xlabel("training wall-clock minutes")
    axes.set_ylabel("dev sacreBLEU (greedy)")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)


def main(argv):
    del argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_matmul import matmul_gflops

    from t2t_repro.files import read_json_object
    from t2t_repro.run_dir import BEST_DIRNAME, CONFIG_FILENAME, SCORES_FILENAME

    evals = sorted(
        glob.glob(os.path.join(FLAGS.eval_dir, "*.json")), key=os.path.getmtime
    )
    if not evals:
        raise app.UsageError(f"{FLAGS.eval_dir}: no t2t-eval JSON found")
    with open(evals[-1], encoding="utf-8") as handle:
        test = json.load(handle)
    history = read_json_object(
        os.path.join(FLAGS.run_dir, BEST_DIRNAME, SCORES_FILENAME)
    )
    config = read_json_object(os.path.join(FLAGS.run_dir, CONFIG_FILENAME))
    averaged = averaged_steps(FLAGS.average_dir)
    counters = checkpoint_counters(FLAGS.run_dir)
    if averaged[-1] != counters["steps"]:
        raise app.UsageError(
            f"{FLAGS.average_dir}: averages checkpoints up to step "
            f"{averaged[-1]}, but {FLAGS.run_dir} trained to "
            f"{counters['steps']}; delete it and average again"
        )
    results = {
        "test": test["test"],
        "sacrebleu": test["sacrebleu"],
        "sacrebleu_signature": test["sacrebleu_signature"],
        "chrf": test["chrf"],
        "tokenized_bleu": test["tokenized_bleu"],
        "tokenized_bleu_note": test["tokenized_bleu_note"],
        "lc_tok_bleu": test["lc_tok_bleu"],
        "lc_tok_bleu_note": test["lc_tok_bleu_note"],
        "beam_size": test["beam_size"],
        "alpha": test["alpha"],
        "averaged": averaged,
        **counters,
        "best_dev_bleu_greedy": max(e["bleu"] for e in history["best"]),
        "stopped_early_at": history["stopped_early_at"],
        **(
            {
                "fp32_matmul_gflops_2048": round(matmul_gflops(2048, "float32"), 1),
                "bf16_matmul_gflops_2048": round(matmul_gflops(2048, "bfloat16"), 1),
            }
            if FLAGS.matmul_ceiling
            else {}
        ),
        "model": config,
        "dev_curve": history["evaluations"],
    }
    with open(FLAGS.output, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2)
    plot_curve(
        history["evaluations"],
        f"{os.path.basename(FLAGS.run_dir)}: test sacreBLEU {test['sacrebleu']:.2f}",
        FLAGS.plot,
    )
    print(
        json.dumps(
            {k: v for k, v in results.items() if k not in ("model", "dev_curve")},
            indent=2,
        )
    )


if __name__ == "__main__":
    app.run(main)
