#!/usr/bin/env python3
"""This machine's TensorFlow matmul ceiling, fp32 and bf16.

    python scripts/bench_matmul.py [--sizes=1024,2048,4096] [--json=OUT]

Machines here differ up to 2x between sessions, so every other benchmark
(and the reference recipe's results file) reports its figures next to
this ceiling, measured in the same process.
"""

import json

from absl import app, flags

FLAGS = flags.FLAGS


def matmul_gflops(size, dtype):
    """GFLOP/s of a `size`^3 matmul in `dtype` ("float32" or "bfloat16"),
    from the best of 5 timed runs."""
    from t2t_repro.training.precision import matmul_seconds

    return 2 * size ** 3 / matmul_seconds(dtype, size) / 1e9


def matmul_ceiling(sizes=(1024, 2048, 4096)):
    """{"float32": {size: GFLOP/s}, "bfloat16": {...}}."""
    return {dtype: {size: round(matmul_gflops(size, dtype), 1)
                    for size in sizes}
            for dtype in ("float32", "bfloat16")}


def main(argv):
    del argv
    sizes = [int(s) for s in FLAGS.sizes]
    table = matmul_ceiling(sizes)
    print("size   fp32 GFLOP/s   bf16 GFLOP/s   bf16/fp32")
    for size in sizes:
        fp32, bf16 = table["float32"][size], table["bfloat16"][size]
        print(f"{size:<6} {fp32:>12.1f}   {bf16:>12.1f}   {bf16 / fp32:>9.2f}")
    if FLAGS.json:
        with open(FLAGS.json, "w", encoding="utf-8") as handle:
            json.dump(table, handle, indent=2)


if __name__ == "__main__":
    # Here, not at import: other scripts import matmul_gflops.
    flags.DEFINE_list("sizes", ["1024", "2048", "4096"],
                      "Square matmul sizes.")
    flags.DEFINE_string("json", None, "Also write the table here.")
    app.run(main)
