#!/usr/bin/env python3
"""Tabulates scripts/table3.sh's runs in the layout of the paper's Table 3,
beside the paper's numbers.

    python scripts/table3_report.py --runs=runs/table3 --output=results/table3

For each run directory (named after its flagfile in flags/table3/): the
model's N, d_model, d_ff, h, d_k, d_v, P_drop, eps_ls and parameters (from
its config.json and training.json), the steps it trained, and its last dev
evaluation: perplexity per subword piece (without label smoothing) and
greedy sacreBLEU on all of Multi30k's val. Writes OUTPUT.md and OUTPUT.json.
The paper's rows are newstest2013 en->de, beam search, checkpoint averaging
and 100k steps of the full-size model: compare the direction of each
change, not the values.
"""

import json
import os

from absl import app, flags

flags.DEFINE_string("runs", "runs/table3", "One run directory per row.")
flags.DEFINE_string("output", "results/table3", "Writes OUTPUT.md and OUTPUT.json.")
FLAGS = flags.FLAGS

# The paper's Table 3 (dev set newstest2013): (PPL, BLEU, params x 1e6), by
# the row of flags/table3/ that changes the same thing by the same ratio.
PAPER = {
    "base": (4.92, 25.8, 65),
    "A-h1": (5.29, 24.9, None),
    "A-h4": (5.00, 25.5, None),
    "A-h16": (4.91, 25.8, None),
    "A-h32": (5.01, 25.4, None),
    "B-dk8": (5.16, 25.1, 58),
    "B-dk16": (5.01, 25.4, 60),
    "C-N1": (6.11, 23.7, 36),
    "C-N2": (5.19, 25.3, 50),
    "C-N4": (4.88, 25.5, 80),
    "C-d128": (5.75, 24.5, 28),
    "C-d512": (4.66, 26.0, 168),
    "C-dff512": (5.12, 25.4, 53),
    "C-dff2048": (4.75, 26.2, 90),
    "D-drop0.0": (5.77, 24.6, None),
    "D-drop0.2": (4.95, 25.5, None),
    "D-ls0.0": (4.67, 25.3, None),
    "D-ls0.2": (5.47, 25.7, None),
    "E-learned": (4.92, 25.7, None),
}
COLUMNS = (
    "row",
    "N",
    "d_model",
    "d_ff",
    "h",
    "d_k",
    "d_v",
    "P_drop",
    "eps_ls",
    "steps",
    "dev_ppl",
    "dev_bleu",
    "params",
    "minutes",
    "paper_ppl",
    "paper_bleu",
    "paper_params_M",
)


def last_dev_scalars(run_dir):
    """{tag: (step, value)} of the newest dev evaluation's scalars."""
    import tensorflow as tf

    from t2t_repro.run_dir import DEV_EVENTS_DIRNAME

    found = {}
    directory = os.path.join(run_dir, DEV_EVENTS_DIRNAME)
    for name in sorted(os.listdir(directory)):
        for event in tf.compat.v1.train.summary_iterator(os.path.join(directory, name)):
            for value in event.summary.value:
                if value.tag in ("perplexity", "bleu"):
                    number = float(tf.make_ndarray(value.tensor))
                    if event.step >= found.get(value.tag, (-1, 0))[0]:
                        found[value.tag] = (event.step, number)
    return found


def table_row(run_dir):
    import keras

    from t2t_repro.config import TransformerConfig
    from t2t_repro.model import Transformer
    from t2t_repro.run_dir import (
        BEST_DIRNAME,
        CONFIG_FILENAME,
        SCORES_FILENAME,
        TRAINING_OPTIONS_FILENAME,
    )

    def read(name):
        with open(os.path.join(run_dir, name), encoding="utf-8") as handle:
            return json.load(handle)

    config = TransformerConfig(**read(CONFIG_FILENAME))
    training = read(TRAINING_OPTIONS_FILENAME)
    dev = last_dev_scalars(run_dir)
    minutes = read(os.path.join(BEST_DIRNAME, SCORES_FILENAME))["evaluations"][-1][
        "minutes"
    ]
    params = Transformer(config).count_params()
    keras.backend.clear_session()
    name = os.path.basename(os.path.normpath(run_dir))
    d_k, d_v = config.head_dims
    paper = PAPER.get(name, (None, None, None))
    return dict(
        zip(
            COLUMNS,
            (
                name,
                config.num_encoder_layers,
                config.d_model,
                config.d_ff,
                config.num_heads,
                d_k,
                d_v,
                config.dropout,
                training["label_smoothing"],
                dev["bleu"][0],
                round(dev["perplexity"][1], 2),
                round(dev["bleu"][1], 2),
                params,
                minutes,
                *paper,
            ),
        )
    )


def markdown(rows):
    def cell(value):
        if value is None:
            return ""
        if isinstance(value, int) and value >= 10_000:
            return f"{value / 1e6:.1f}M"
        return str(value)

    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(row[c]) for c in COLUMNS) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    from t2t_repro.run_dir import DEV_EVENTS_DIRNAME

    order = list(PAPER)
    names = sorted(
        (
            n
            for n in os.listdir(FLAGS.runs)
            if os.path.exists(os.path.join(FLAGS.runs, n, DEV_EVENTS_DIRNAME))
        ),
        key=lambda n: (order.index(n) if n in order else 99, n),
    )
    if not names:
        raise app.UsageError(f"{FLAGS.runs}: no evaluated runs")
    rows = [table_row(os.path.join(FLAGS.runs, n)) for n in names]
    table = markdown(rows)
    with open(FLAGS.output + ".md", "w", encoding="utf-8") as handle:
        handle.write(table)
    with open(FLAGS.output + ".json", "w", encoding="utf-8") as handle:
        json.dump(rows, handle, indent=2)
    print(table, end="")


if __name__ == "__main__":
    app.run(main)
