#!/usr/bin/env python3
r"""Translation throughput of one run's checkpoint through every decoder:
the in-process graph (with and without XLA), the SavedModel's
serving_default (the default export and a --decode_jit_compile one),
each also in bf16 (--precision=bf16), and CTranslate2 (float32 and
int8).

    python scripts/bench_decode.py --model_dir=runs/multi30k \
        [--input=data/multi30k/test_2016_flickr.en.gz] \
        [--engines=...] [--beams=1,4] [--batches=32] [--orders=sorted] \
        [--parallel_searches=N] [--rounds=N] [--json=OUT]

Each engine translates the same --sentences input lines in batches of
--batches sentences, in length-sorted order (as t2t-translate/t2t-eval
batch) or in input order ("unsorted"), --passes times: the first pass
pays for tracing and XLA compilation; TensorFlow's later passes still
speed up for a while (the second ran 10-25% below the third here), so
the steady state is the best pass after the first. The table gives
sentences/s of the first, second and best later pass, the latter
relative to CTranslate2 float32's (same checkpoint, same process,
--ct2_threads threads), and the fp32 matmul rate measured by the same
run, since machines differ. Each engine runs as the tools run it: beam
and greedy search as --parallel_searches side-by-side searches, each op
limited to its search's share of the cores (t2t_repro/inference/
threads.py; XLA engines keep TensorFlow's default;
TF_NUM_INTRAOP_THREADS overrides), CTranslate2 as that many workers.
Each engine runs in a process of its own, as a server would: after an
XLA engine had compiled in the same process, the non-XLA SavedModel that
followed ran at 58 sentences/s where a fresh process gave 80.
With --rounds=N the whole list of engines runs N times, one engine after
the other, and each figure is the median over rounds; the ratio to
CTranslate2 is the median of each round's ratio, so that both sides of
it were measured minutes apart (CTranslate2 itself moved between 87 and
167 sentences/s from one run to the next here).
First-request and single-sentence latency of a SavedModel:
scripts/bench_serving.py.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags

# *_bf16: weights and matmuls in bf16 (t2t-export/t2t-translate
# --precision=bf16).
ENGINES = (
    "graph",
    "graph_xla",
    "graph_bf16",
    "saved_model",
    "saved_model_xla",
    "saved_model_bf16",
    "saved_model_xla_bf16",
    "ct2",
    "ct2_int8",
)
flags.DEFINE_string("model_dir", None, "A t2t-train run.")
flags.DEFINE_string("checkpoint", None, "Default: the run's latest.")
flags.DEFINE_string(
    "input",
    "data/multi30k/test_2016_flickr.en.gz",
    "Source sentences, one per line (.gz too).",
)
flags.DEFINE_integer("sentences", 1000, "How many input lines to translate.")
flags.DEFINE_list("engines", list(ENGINES), f"Any of {', '.join(ENGINES)}.")
flags.DEFINE_list("beams", ["4"], "Beam sizes (1 = greedy).")
flags.DEFINE_list("batches", ["32"], "Sentences per batch.")
flags.DEFINE_list("orders", ["sorted"], "sorted (by length) and/or unsorted.")
flags.DEFINE_integer("passes", 3, "Passes over the input per engine (at least 2).")
flags.DEFINE_integer("ct2_threads", 2, "CTranslate2's CPU threads, in all.")
flags.DEFINE_integer(
    "parallel_searches",
    None,
    "Our engines' --decode_parallel_searches (default: its default).",
)
flags.DEFINE_integer(
    "rounds", 1, "Runs of the whole engine list; the table gives medians over them."
)
flags.DEFINE_string("json", None, "Also write the results here.")
flags.DEFINE_string(
    "one_engine",
    None,
    "Internal: measure only this "
    "engine (and the first of --beams) and write its rows "
    "as JSON to --rows_json.",
)
flags.DEFINE_string("rows_json", None, "Internal, see --one_engine.")
flags.mark_flags_as_required(["model_dir"])
FLAGS = flags.FLAGS


def _batches(sentences, size, order):
    indices = list(range(len(sentences)))
    if order == "sorted":
        indices.sort(key=lambda i: -len(sentences[i].split()))
    return [
        [sentences[i] for i in indices[start : start + size]]
        for start in range(0, len(indices), size)
    ]


def _engine(name, beam, workdir):
    """`translate(list of str) -> list of str` for one batch."""
    import dataclasses

    import tensorflow as tf

    from t2t_repro.checkpoints import load_model
    from t2t_repro.config import DecodingOptions
    from t2t_repro.data.vocabulary import make_tokenizer
    from t2t_repro.decoding.precision import in_precision
    from t2t_repro.inference.graph import TranslationGraph
    from t2t_repro.inference.threads import use_decoding_threads

    precision = "bf16" if name.endswith("_bf16") else "fp32"
    decoding = DecodingOptions(
        beam_size=beam,
        jit_compile="_xla" in name,
        max_batch_sentences=max(int(b) for b in FLAGS.batches),
    )
    if FLAGS.parallel_searches:
        decoding = dataclasses.replace(
            decoding, parallel_searches=FLAGS.parallel_searches
        )
    if not name.startswith("ct2"):  # CTranslate2Translator sets its own
        use_decoding_threads(decoding)
    if name.startswith("graph"):
        model, proto, _ = load_model(FLAGS.model_dir, FLAGS.checkpoint)
        graph = TranslationGraph(
            in_precision(model, precision), make_tokenizer(proto), decoding
        )
        return lambda batch: graph.serve(tf.constant(batch))["translations"]
    if name.startswith("saved_model"):
        from t2t_repro.serving import export_saved_model

        path = export_saved_model(
            FLAGS.model_dir,
            workdir,
            version=len(os.listdir(workdir)) + 1,
            checkpoint=FLAGS.checkpoint,
            decoding=decoding,
            warmup_requests=0,
            precision=precision,
        )
        serve = tf.saved_model.load(path).signatures["serving_default"]
        return lambda batch: serve(inputs=tf.constant(batch))["translations"]
    from t2t_repro.ct2 import CTranslate2Translator, export_ctranslate2

    path = export_ctranslate2(
        FLAGS.model_dir,
        os.path.join(workdir, f"{name}_{beam}"),
        FLAGS.checkpoint,
        "int8" if name == "ct2_int8" else None,
    )
    translator = CTranslate2Translator(
        path,
        dataclasses.replace(decoding, max_batch_sentences=10**6, batch_tokens=10**9),
        FLAGS.ct2_threads,
    )
    return translator.translate


def _measure(name, beam, sentences, workdir):
    """Rows of sentences/s of one engine over every batch size and order."""
    translate = _engine(name, beam, workdir)
    rows = []
    for size in map(int, FLAGS.batches):
        for order in FLAGS.orders:
            batches = _batches(sentences, size, order)
            passes = []
            for _ in range(FLAGS.passes):
                start = time.perf_counter()
                for batch in batches:
                    translate(batch)
                passes.append(len(sentences) / (time.perf_counter() - start))
            rows.append(
                {
                    "beam": beam,
                    "engine": name,
                    "batch": size,
                    "order": order,
                    "first_pass": round(passes[0], 1),
                    "second_pass": round(passes[1], 1),
                    "steady": round(max(passes[1:]), 1),
                }
            )
    return rows


def _measure_in_new_process(name, beam, workdir):
    rows_json = os.path.join(workdir, f"{name}_{beam}.json")
    passed = [
        f"--{flag}={FLAGS[flag].serialize().split('=', 1)[1]}"
        for flag in (
            "model_dir",
            "input",
            "sentences",
            "batches",
            "orders",
            "passes",
            "ct2_threads",
        )
    ]
    for flag in ("checkpoint", "parallel_searches"):
        if FLAGS[flag].value:
            passed.append(f"--{flag}={FLAGS[flag].value}")
    subprocess.run(
        [
            sys.executable,
            os.path.abspath(__file__),
            *passed,
            f"--one_engine={name}",
            f"--beams={beam}",
            f"--rows_json={rows_json}",
        ],
        check=True,
    )
    with open(rows_json, encoding="utf-8") as handle:
        return json.load(handle)


def _summary(rows):
    """One row per beam, engine, batch and order: medians over rounds, and
    the median of each round's steady ratio to CTranslate2 float32."""

    def key(row):
        return tuple(row[k] for k in ("beam", "engine", "batch", "order"))

    summary = []
    for group in dict.fromkeys(map(key, rows)):
        mine = [r for r in rows if key(r) == group]
        reference = {
            r["round"]: r["steady"]
            for r in rows
            if key(r) == (group[0], "ct2") + group[2:]
        }
        ratios = [
            round(r["steady"] / reference[r["round"]], 2)
            for r in mine
            if r["round"] in reference
        ]
        summary.append(
            {
                **dict(zip(("beam", "engine", "batch", "order"), group)),
                **{
                    field: statistics.median(r[field] for r in mine)
                    for field in ("first_pass", "second_pass", "steady")
                },
                "steady_rounds": [r["steady"] for r in mine],
                "vs_ct2": statistics.median(ratios) if ratios else None,
                "vs_ct2_rounds": ratios,
            }
        )
    return summary


def main(argv):
    del argv
    from bench_matmul import cpu_description, describe_cpu, matmul_ceiling

    from t2t_repro.data.text_files import read_lines

    unknown = set(FLAGS.engines) - set(ENGINES)
    if unknown:
        raise app.UsageError(f"--engines: unknown {sorted(unknown)}")
    if FLAGS.passes < 2:
        raise app.UsageError("--passes: at least 2 (the first is warm-up)")
    if FLAGS.one_engine:
        sentences = read_lines(FLAGS.input)[: FLAGS.sentences]
        with tempfile.TemporaryDirectory() as workdir:
            rows = _measure(FLAGS.one_engine, int(FLAGS.beams[0]), sentences, workdir)
        with open(FLAGS.rows_json, "w", encoding="utf-8") as handle:
            json.dump(rows, handle)
        return
    ceiling = matmul_ceiling(sizes=(2048,))
    print(describe_cpu())
    print(
        f"{FLAGS.model_dir}: {FLAGS.sentences} sentences at most; "
        f"parallel searches {FLAGS.parallel_searches or 'default'}; matmul "
        f"2048^3 fp32 {ceiling['float32'][2048]} GFLOP/s"
    )
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for number in range(FLAGS.rounds):
            for beam in map(int, FLAGS.beams):
                for name in FLAGS.engines:
                    measured = _measure_in_new_process(name, beam, workdir)
                    for row in measured:
                        row["round"] = number
                        print(row, flush=True)
                    rows += measured
    print(
        "\nbeam  engine                batch  order     first pass  second "
        "pass  steady  (sentences/s)  steady vs ct2"
    )
    summary = _summary(rows)
    for row in summary:
        ratio = f"{row['vs_ct2']:6.2f}" if row["vs_ct2"] is not None else "     -"
        print(
            f"{row['beam']:<5} {row['engine']:21} {row['batch']:<6} "
            f"{row['order']:9} {row['first_pass']:10.1f}  "
            f"{row['second_pass']:11.1f}  {row['steady']:6.1f}  {'':13}  "
            f"{ratio}"
        )
        if FLAGS.rounds > 1 and row["vs_ct2_rounds"]:
            print(
                f"{'':5} rounds: steady {row['steady_rounds']}, vs ct2 "
                f"{row['vs_ct2_rounds']}"
            )
    if FLAGS.json:
        with open(FLAGS.json, "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "cpu": cpu_description(),
                    "rows": rows,
                    "summary": summary,
                    "matmul_gflops": ceiling,
                },
                handle,
                indent=1,
            )


if __name__ == "__main__":
    app.run(main)
