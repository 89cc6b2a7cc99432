"""The C++ training kernels (t2t_repro.kernels) compile without
warnings, and give the same bits whatever the number of threads
TensorFlow splits their rows over, and on every call: the property
resumed and repeated runs rely on. (Each kernel's arithmetic is checked
against NumPy in the tests of the layer that uses it.)"""

import json
import subprocess

import pytest

from helpers.processes import run_python
from t2t_repro import kernels

# Forward and backward of every kernel on tensors large enough to be split
# into many blocks; prints a hash of each result's bytes, twice.
_SCRIPT = """
import hashlib, json, sys
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[1]))
from t2t_repro import kernels

assert kernels.library() is not None
rng = tf.random.Generator.from_seed(1)
x = tf.cast(rng.normal([3000, 256]), tf.bfloat16)
gamma, beta = rng.normal([256]), rng.normal([256])
logits = tf.cast(rng.normal([120, 4, 30, 30]), tf.bfloat16)
mask = rng.uniform([120, 1, 1, 30]) > 0.2
labels = rng.uniform([3000], maxval=256, dtype=tf.int32)


def results():
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([x, logits])
        outputs = {
            "layer_norm": kernels.layer_norm(x, gamma, beta, 1e-6),
            "masked_softmax": kernels.masked_softmax(logits, mask, 8.0),
            "dropout": kernels.dropout(x, tf.constant([3, 4]), 19661),
            "loss": kernels.smoothed_cross_entropy(labels, x, 0.1)[0],
        }
    for name, output in list(outputs.items()):
        source = logits if name == "masked_softmax" else x
        outputs[name + "_grad"] = tape.gradient(output, source, tf.ones_like(output))
    return {
        name: hashlib.sha256(tf.io.serialize_tensor(t).numpy()).hexdigest()
        for name, t in outputs.items()
    }


print(json.dumps([results(), results()]))
"""


@pytest.mark.slow
def test_kernels_give_the_same_bits_on_any_thread_count():
    hashes = {}
    for threads in (1, 4):
        result = run_python(["-c", _SCRIPT, str(threads)])
        assert result.returncode == 0, result.stderr[-3000:]
        first, second = json.loads(result.stdout.strip().splitlines()[-1])
        assert first == second  # two identical calls
        hashes[threads] = first
    assert len(hashes[1]) == 8
    assert hashes[1] == hashes[4]


@pytest.mark.slow
@pytest.mark.parametrize("source", kernels.SOURCES, ids=lambda path: path.name)
def test_kernels_compile_without_warnings(source):
    # Deprecated TensorFlow APIs warn first and are gone a release later,
    # when the build would fail and training fall back to the ops.
    result = subprocess.run(
        [kernels.compiler(), "-fsyntax-only", "-Werror", *kernels.compile_flags()]
        + [str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
