"""Choosing the tf.distribute strategy for this process."""

import contextlib
import hashlib
import json
import os

import numpy as np
import tensorflow as tf

from t2t_repro.config import ConfigError
from t2t_repro.training import TrainingError

# The task types that hold replicas under MultiWorkerMirroredStrategy; a
# chief is a worker that also writes checkpoints and summaries.
REPLICA_TASK_TYPES = ("chief", "worker")
# What a collective operation raises when a peer task stopped, died or
# cannot be reached (or, with --collective_timeout, is stuck).
LOST_PEER_ERRORS = (
    tf.errors.DeadlineExceededError,
    tf.errors.UnavailableError,
    tf.errors.CancelledError,
    tf.errors.AbortedError,
)
# A task that a cluster may have beside them (TFJob, Vertex AI), which
# the strategy leaves out; training evaluates on dev itself.
EVALUATOR_TASK_TYPE = "evaluator"


def training_tasks(tf_config_text=None):
    """The number of processes that train together under TF_CONFIG (1
    without it), after checking TF_CONFIG names this process's task.

    Both layouts count: workers only, and a chief plus workers (Kubernetes
    TFJob, Vertex AI); an evaluator task does not. ConfigError names what
    is wrong with TF_CONFIG.
    """
    checked = _checked_tf_config(tf_config_text)
    if checked is None:
        return 1
    cluster, _ = checked
    return sum(len(cluster.get(kind, [])) for kind in REPLICA_TASK_TYPES)


def is_evaluator(tf_config_text=None):
    """Whether TF_CONFIG makes this process the cluster's evaluator task."""
    checked = _checked_tf_config(tf_config_text)
    return checked is not None and checked[1] == EVALUATOR_TASK_TYPE


def _checked_tf_config(tf_config_text):
    """(cluster, this task's type) of TF_CONFIG (the environment's for
    None), None if it is unset; ConfigError names what is wrong with it."""
    if tf_config_text is None:
        tf_config_text = os.environ.get("TF_CONFIG", "")
    if not tf_config_text.strip():
        return None
    try:
        tf_config = json.loads(tf_config_text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"TF_CONFIG is not JSON: {error}") from None
    if not isinstance(tf_config, dict):
        raise ConfigError('TF_CONFIG must be a JSON object with "cluster" and "task"')
    cluster = tf_config.get("cluster") or {}
    if not isinstance(cluster, dict) or not all(
        isinstance(tasks, list) for tasks in cluster.values()
    ):
        raise ConfigError(
            'TF_CONFIG: "cluster" must map task types to lists of host:port addresses'
        )
    unsupported = sorted(set(cluster) - {*REPLICA_TASK_TYPES, EVALUATOR_TASK_TYPE})
    if unsupported:
        raise ConfigError(
            f"TF_CONFIG: task type(s) {', '.join(unsupported)} "
            "not supported (MultiWorkerMirroredStrategy takes "
            "a chief and workers, and an evaluator beside them)"
        )
    for kind in ("chief", EVALUATOR_TASK_TYPE):
        if len(cluster.get(kind, [])) > 1:
            raise ConfigError(
                f"TF_CONFIG: at most one {kind}, got {len(cluster[kind])}"
            )
    if not any(cluster.get(kind) for kind in REPLICA_TASK_TYPES):
        raise ConfigError("TF_CONFIG: the cluster has no chief or worker task")
    task = tf_config.get("task")
    if not isinstance(task, dict) or "type" not in task:
        raise ConfigError(
            'TF_CONFIG: no "task" (give this process\'s {"type": "worker", "index": N})'
        )
    kind, index = task["type"], task.get("index", 0)
    if kind not in cluster:
        raise ConfigError(
            f"TF_CONFIG: task type {kind!r} is not in the "
            f"cluster ({', '.join(sorted(cluster)) or 'empty'})"
        )
    if type(index) is not int:
        raise ConfigError(
            f"TF_CONFIG: task index {index!r} is not an integer (give "
            '"index": 0, not "0")'
        )
    if not 0 <= index < len(cluster[kind]):
        raise ConfigError(
            f"TF_CONFIG: task index {index} out of range: "
            f"the cluster has {len(cluster[kind])} {kind} "
            "task(s)"
        )
    return cluster, kind


def split_cpu(num_devices):
    """Splits the CPU into `num_devices` logical devices (before any op)."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    existing = tf.config.get_logical_device_configuration(cpu)
    if existing and len(existing) == num_devices:
        return
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * num_devices
    )


def make_strategy(cpu_devices=1, collective_timeout=0):
    """MultiWorkerMirrored if TF_CONFIG names several tasks, else Mirrored.

    MirroredStrategy uses every local GPU, or the CPU when there is none;
    `cpu_devices` > 1 splits the CPU into logical devices and mirrors over
    those (useful to exercise multi-replica code; it is slower than one
    replica on a CPU). With several workers, a collective operation that
    has not finished after `collective_timeout` seconds (0: no limit)
    raises DeadlineExceededError instead of waiting for a stalled peer.
    """
    if cpu_devices > 1:
        split_cpu(cpu_devices)
    if training_tasks() > 1:
        options = tf.distribute.experimental.CommunicationOptions(
            timeout_seconds=collective_timeout or None
        )
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    if cpu_devices > 1:
        return tf.distribute.MirroredStrategy(
            [device.name for device in tf.config.list_logical_devices("CPU")]
        )
    return tf.distribute.MirroredStrategy()


def input_context(strategy):
    """This worker's `tf.distribute.InputContext`, as
    `distribute_datasets_from_function` would make it: one input pipeline
    per worker, numbered as the strategy numbers workers (chief first)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    cluster = resolver.cluster_spec().as_dict() if resolver else {}
    workers = len(cluster.get("chief", [])) + len(cluster.get("worker", [])) or 1
    pipeline_id = 0
    if workers > 1 and resolver.task_type == "worker":
        pipeline_id = resolver.task_id + len(cluster.get("chief", []))
    return tf.distribute.InputContext(
        num_input_pipelines=workers,
        input_pipeline_id=pipeline_id,
        num_replicas_in_sync=strategy.num_replicas_in_sync,
    )


def is_chief(strategy):
    """True on the worker that writes checkpoints and summaries."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    return resolver.task_type == "chief" or (
        resolver.task_type == "worker"
        and resolver.task_id == 0
        and "chief" not in resolver.cluster_spec().as_dict()
    )


def task_name(strategy):
    """This process's task, e.g. "worker 1"; None without TF_CONFIG."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return None
    return f"{resolver.task_type} {resolver.task_id}"


def fingerprint(value):
    """A 63-bit integer that tells JSON-able values apart."""
    text = json.dumps(value, sort_keys=True, default=str)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def gathered_from_tasks(strategy, numbers):
    """{name: [its value on each replica of every task, the chief's
    first]} of `numbers` ({name: int64-able}), gathered by a collective
    operation that every task must reach. Call it before any variable
    exists, so that tasks that would build other variables (another model,
    precision or optimizer) still meet here."""
    names = sorted(numbers)
    local = tf.constant([[numbers[name] for name in names]], tf.int64)

    def gather():
        return tf.distribute.get_replica_context().all_gather(local, axis=0)

    table = strategy.experimental_local_results(
        strategy.run(tf.function(gather, autograph=False))
    )
    table = np.asarray(table[0])
    return {name: table[:, i].tolist() for i, name in enumerate(names)}


@contextlib.contextmanager
def lost_peers_named(strategy):
    """Turns, on a multi-worker `strategy`, a collective operation that
    failed while the run is prepared into one TrainingError: another task
    stopped at start-up (its log, the chief's for a refused flag or file,
    says why) or cannot be reached."""
    try:
        yield
    except LOST_PEER_ERRORS as error:
        if input_context(strategy).num_input_pipelines <= 1:
            raise
        raise TrainingError(
            f"preparing the run: an operation failed ({type(error).__name__}), "
            "most likely because another task stopped (its log says why) or "
            "cannot be reached"
        ) from None
