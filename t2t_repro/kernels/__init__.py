"""C++ CPU kernels for the training step, built on first use.

Four parts of a training step are many small passes over large tensors
in TensorFlow: LayerNorm (TensorFlow has no fused one for training on
CPU; the closed-form one in `t2t_repro.layers` is a dozen ops each way),
the attention weights (scale, mask, softmax, casts: about ten ops each
way), dropout (random bits, a comparison, a mask, a multiply) and the
label-smoothed loss over the `[tokens, vocab]` logits (XLA
compiles it, once per batch shape). In a bf16 step whose matmuls run
fast, they are a large part of the step. `layer_norm.cc`,
`masked_softmax.cc`, `dropout.cc` and `cross_entropy.cc` do each
direction in one pass.

They are compiled with the system's C++ compiler against the installed
TensorFlow's headers the first time a training step asks for them, for
this CPU (`-march=native`), and cached under `$XDG_CACHE_HOME/t2t_repro`
(default `~/.cache`), keyed by the sources, the TensorFlow build, the
compiler and the CPU's flags. Where they cannot be built (no compiler, a
read-only cache) training logs why once per process and runs the
TensorFlow ops: the same functions, the same checkpoints.

Only a training step on CPUs uses them (inside `enabled(True)`): exports
and decoders stay plain TensorFlow, which TF Serving and XLA can run,
and GPUs keep TensorFlow's ops.

    with kernels.enabled(True):
        logits = model(batch, training=True)   # LayerNorm: a C++ kernel
"""

import contextlib
import functools
import hashlib
import os
import pathlib
import platform
import shutil
import subprocess
import tempfile
import time

import tensorflow as tf
from absl import logging

_DIRECTORY = pathlib.Path(__file__).parent
SOURCES = [
    _DIRECTORY / name
    for name in ("layer_norm.cc", "masked_softmax.cc", "dropout.cc", "cross_entropy.cc")
]
_HEADERS = [_DIRECTORY / "row_kernels.h"]
_KERNELS = "LayerNorm, attention weights, dropout and the loss"
# The dtypes the kernels are registered for; anything else (float16,
# float64) runs the TensorFlow ops.
_KERNEL_DTYPES = (tf.float32, tf.bfloat16)
# Process-wide, not per thread: MirroredStrategy traces each local
# replica's step in a thread of its own.
_active = False


@contextlib.contextmanager
def enabled(use_kernels: bool):
    """Within this block, layers built by this package that have a C++
    kernel use it when they are traced (if it builds here)."""
    global _active
    previous, _active = _active, use_kernels
    try:
        yield
    finally:
        _active = previous


def active() -> bool:
    """True inside `enabled(True)` when the kernels are built and loaded."""
    return _active and library() is not None


def applies_to(dtype) -> bool:
    """Whether a tensor of `dtype` goes through a kernel here and now."""
    return dtype in _KERNEL_DTYPES and active()


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return next((line for line in cpuinfo if line.startswith("flags")), "")
    except OSError:
        return ""


def compile_flags() -> list[str]:
    """The compiler flags of the kernels' build, without its output and
    link flags. TensorFlow's headers are system headers (-isystem), so
    that -Wall -Wextra speak of the kernels' own code only
    (tests/test_kernels.py compiles them with -Werror added)."""
    # -march=native: this CPU's vector width. Eigen's headers in TF 2.21 do
    # not compile with AVX512-FP16 enabled (GCC 12), and nothing here
    # needs it.
    arch = (
        ["-march=native", "-mno-avx512fp16"]
        if platform.machine() in ("x86_64", "AMD64")
        else []
    )
    return [
        "-fPIC",
        "-O3",
        "-fopenmp-simd",
        "-Wall",
        "-Wextra",
        *arch,
        *(
            "-isystem" + flag[2:] if flag.startswith("-I") else flag
            for flag in tf.sysconfig.get_compile_flags()
        ),
    ]


def compiler() -> str:
    """The C++ compiler the kernels are built with: $CXX, else g++."""
    return os.environ.get("CXX", "g++")


def _compile_command(sources: list[str], output: str) -> list[str]:
    return [
        compiler(),
        "-shared",
        *compile_flags(),
        *sources,
        "-o",
        output,
        *tf.sysconfig.get_link_flags(),
    ]


def _compiler_version(compiler: str) -> str:
    try:
        return subprocess.run(
            [compiler, "--version"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def cache_path() -> pathlib.Path:
    """Where this machine's build of the kernels is (or will be) cached."""
    command = _compile_command(["SOURCES"], "OUTPUT")
    key = hashlib.sha256()
    for path in SOURCES + _HEADERS:
        key.update(path.read_bytes())
    key.update(f"{tf.__version__} {tf.version.GIT_VERSION}".encode())
    key.update(" ".join(command).encode())
    key.update(_compiler_version(command[0]).encode())
    key.update(_cpu_flags().encode())
    root = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return pathlib.Path(root, "t2t_repro", f"kernels-{key.hexdigest()[:16]}.so")


def _build(target: pathlib.Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    # Built beside the target and renamed: processes building at once
    # (workers of one host, test runners) never load a partial file.
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        output = os.path.join(scratch, target.name)
        command = _compile_command([str(path) for path in SOURCES], output)
        if shutil.which(command[0]) is None:
            raise OSError(f"no C++ compiler {command[0]!r} on PATH (set CXX)")
        result = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if result.returncode:
            lines = result.stderr.strip().splitlines() or ["no output"]
            first_error = next((line for line in lines if "error" in line), lines[-1])
            raise OSError(f"{command[0]} exited {result.returncode}: {first_error}")
        os.replace(output, target)


def _build_and_load(target: pathlib.Path):
    started = time.monotonic()
    _build(target)
    logging.info(
        "training with C++ kernels for %s, built in %.0f s: %s",
        _KERNELS,
        time.monotonic() - started,
        target,
    )
    return tf.load_op_library(str(target))


@functools.cache
def library():
    """The loaded op library, built first if this machine has no cached
    build (or a cached one that does not load); None, logged once per
    process with the reason, where it cannot be built."""
    target = cache_path()
    try:
        if target.exists():
            try:
                loaded = tf.load_op_library(str(target))
                logging.info("training with C++ kernels for %s: %s", _KERNELS, target)
                return loaded
            except tf.errors.OpError as error:
                logging.warning("rebuilding %s, which did not load: %s", target, error)
                target.unlink(missing_ok=True)
        return _build_and_load(target)
    except (OSError, subprocess.SubprocessError, tf.errors.OpError) as error:
        logging.warning(
            "%s train with TensorFlow ops, not C++ kernels, which could "
            "not be built and loaded here (%s); --cpu_kernels=tf skips the "
            "attempt",
            _KERNELS,
            error,
        )
        return None


def layer_norm(x, gamma, beta, epsilon):
    """LayerNorm of x `[..., width]` (float32 or bfloat16) over its last
    axis with float32 `gamma`, `beta` `[width]`: one C++ pass forward and
    one backward, float32 statistics; y in x's dtype. The same function
    as `t2t_repro.layers.layer_normalization.layer_norm`; needs
    `library()`."""
    ops = library()

    @tf.custom_gradient
    def forward(x, gamma, beta):
        y, mean, rstd = ops.t2t_layer_norm(x, gamma, beta, epsilon=epsilon)

        def backward(dy):
            return ops.t2t_layer_norm_grad(tf.cast(dy, x.dtype), x, gamma, mean, rstd)

        return y, backward

    return forward(x, gamma, beta)


def masked_softmax(logits, mask, depth_sqrt):
    """Attention weights `softmax(where(mask, logits / depth_sqrt, NEG_INF))
    * mask` of logits `[batch, heads, queries, keys]` (float32 or
    bfloat16; weights in their dtype, float32 arithmetic) with a boolean
    mask whose first three axes are 1 or the logits': one C++ pass
    forward and one backward. The same function as
    `t2t_repro.layers.ScaledDotProductAttention`'s TensorFlow ops; needs
    `library()`."""
    ops = library()
    mask = tf.cast(mask, tf.bool)
    depth_sqrt = tf.cast(depth_sqrt, tf.float32)

    @tf.custom_gradient
    def forward(logits):
        weights = ops.t2t_masked_softmax(logits, mask, depth_sqrt)

        def backward(dweights):
            return ops.t2t_masked_softmax_grad(
                tf.cast(dweights, logits.dtype), logits, mask, depth_sqrt
            )

        return weights, backward

    return forward(logits)


def dropout(x, seed, threshold):
    """x (float32 or bfloat16) times 65536 / (65536 - threshold) where a
    16-bit draw reaches `threshold`, else times 0, the draws being those of
    `t2t_repro.layers.Dropout`'s TensorFlow ops for the int32 `seed` `[2]`:
    one C++ pass forward, one backward (the mask drawn again); needs
    `library()`."""
    ops = library()
    key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=seed)

    @tf.custom_gradient
    def forward(x):
        def backward(dy):
            return ops.t2t_dropout(
                tf.cast(dy, x.dtype), key, counter, threshold=threshold
            )

        return ops.t2t_dropout(x, key, counter, threshold=threshold), backward

    return forward(x)


def smoothed_cross_entropy(labels, logits, smoothing):
    """(per-position label-smoothed cross-entropy, float32; whether the
    argmax is the label) of logits `[..., vocab]` (float32 or bfloat16)
    and int32 labels `[...]`: one C++ pass per row forward and one
    backward (to the logits, in their dtype). The same function as
    `t2t_repro.training.losses`' XLA-compiled one; needs `library()`."""
    ops = library()
    labels = tf.cast(labels, tf.int32)
    smoothing = tf.cast(smoothing, tf.float32)

    @tf.custom_gradient
    def forward(logits):
        loss, hit, log_partition = ops.t2t_smoothed_cross_entropy(
            logits, labels, smoothing
        )

        def backward(dloss, unused_dhit):
            return ops.t2t_smoothed_cross_entropy_grad(
                dloss, logits, labels, log_partition, smoothing
            )

        return (loss, hit), backward

    return forward(logits)
