"""Choosing the tf.distribute strategy for this process."""

import json
import os

import tensorflow as tf


def cluster_workers():
    """The worker addresses TF_CONFIG names (empty without TF_CONFIG)."""
    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    return tf_config.get("cluster", {}).get("worker", [])


def split_cpu(num_devices):
    """Splits the CPU into `num_devices` logical devices (before any op)."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    existing = tf.config.get_logical_device_configuration(cpu)
    if existing and len(existing) == num_devices:
        return
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * num_devices)


def make_strategy(cpu_devices=1):
    """MultiWorkerMirrored if TF_CONFIG names several workers, else Mirrored.

    MirroredStrategy uses every local GPU, or the CPU when there is none;
    `cpu_devices` > 1 splits the CPU into logical devices and mirrors over
    those (useful to exercise multi-replica code; it is slower than one
    replica on a CPU).
    """
    if cpu_devices > 1:
        split_cpu(cpu_devices)
    if len(cluster_workers()) > 1:
        return tf.distribute.MultiWorkerMirroredStrategy()
    if cpu_devices > 1:
        return tf.distribute.MirroredStrategy(
            [device.name for device in tf.config.list_logical_devices("CPU")])
    return tf.distribute.MirroredStrategy()


def input_context(strategy):
    """This worker's `tf.distribute.InputContext`, as
    `distribute_datasets_from_function` would make it: one input pipeline
    per worker, numbered as the strategy numbers workers (chief first)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    cluster = resolver.cluster_spec().as_dict() if resolver else {}
    workers = (len(cluster.get("chief", [])) + len(cluster.get("worker", []))
               or 1)
    pipeline_id = 0
    if workers > 1 and resolver.task_type == "worker":
        pipeline_id = resolver.task_id + len(cluster.get("chief", []))
    return tf.distribute.InputContext(
        num_input_pipelines=workers, input_pipeline_id=pipeline_id,
        num_replicas_in_sync=strategy.num_replicas_in_sync)


def is_chief(strategy):
    """True on the worker that writes checkpoints and summaries."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    return (resolver.task_type == "chief" or
            (resolver.task_type == "worker" and resolver.task_id == 0
             and "chief" not in resolver.cluster_spec().as_dict()))
