#!/usr/bin/env python3
"""This machine's TensorFlow matmul ceiling, fp32 and bf16.

    python scripts/bench_matmul.py [--sizes=1024,2048,4096] [--json=OUT]

Machines here differ up to 2x between sessions, so every other benchmark
(and the reference recipe's results file) reports its figures next to
this ceiling, measured in the same process.
"""

import json
import platform

from absl import app, flags

FLAGS = flags.FLAGS
# The CPU flags that decide what bf16 costs: a figure measured on one kind
# of CPU says nothing about another.
_BF16_FLAGS = ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f", "avx2")


def cpu_description(cpuinfo="/proc/cpuinfo"):
    """{"model": the CPU's name, "flags": which of _BF16_FLAGS it has}."""
    model, present = platform.processor() or platform.machine(), set()
    try:
        with open(cpuinfo, encoding="utf-8") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() == "flags":
                    present = set(value.split())
                    break
    except OSError:  # not Linux: the name platform gives
        pass
    return {"model": model, "flags": [flag for flag in _BF16_FLAGS if flag in present]}


def describe_cpu():
    """One line naming the CPU and its bf16-relevant flags."""
    cpu = cpu_description()
    return f"CPU: {cpu['model']} [{' '.join(cpu['flags']) or 'no AVX2'}]"


def matmul_gflops(size, dtype):
    """GFLOP/s of a `size`^3 matmul in `dtype` ("float32" or "bfloat16"),
    from the best of 5 timed runs."""
    from t2t_repro.training.precision import matmul_seconds

    return 2 * size**3 / matmul_seconds(dtype, size) / 1e9


def matmul_ceiling(sizes=(1024, 2048, 4096)):
    """{"float32": {size: GFLOP/s}, "bfloat16": {...}}."""
    return {
        dtype: {size: round(matmul_gflops(size, dtype), 1) for size in sizes}
        for dtype in ("float32", "bfloat16")
    }


def main(argv):
    del argv
    sizes = [int(s) for s in FLAGS.sizes]
    table = matmul_ceiling(sizes)
    print(describe_cpu())
    print("size   fp32 GFLOP/s   bf16 GFLOP/s   bf16/fp32")
    for size in sizes:
        fp32, bf16 = table["float32"][size], table["bfloat16"][size]
        print(f"{size:<6} {fp32:>12.1f}   {bf16:>12.1f}   {bf16 / fp32:>9.2f}")
    if FLAGS.json:
        with open(FLAGS.json, "w", encoding="utf-8") as handle:
            json.dump({"cpu": cpu_description(), **table}, handle, indent=2)


if __name__ == "__main__":
    # Here, not at import: other scripts import matmul_gflops.
    flags.DEFINE_list("sizes", ["1024", "2048", "4096"], "Square matmul sizes.")
    flags.DEFINE_string("json", None, "Also write the table here.")
    app.run(main)
