"""TF_CONFIG: which layouts train together, and one-line errors for bad ones."""

import json

import pytest

from helpers.train_command import run_train
from t2t_repro.config import ConfigError
from t2t_repro.training.distribution import is_evaluator, training_tasks


def _tf_config(cluster, task):
    return json.dumps({"cluster": cluster, "task": task})


@pytest.mark.parametrize(
    "cluster, task, tasks",
    [
        ({"worker": ["a:1", "b:1"]}, {"type": "worker", "index": 1}, 2),
        # The Kubernetes TFJob / Vertex AI layout: the chief trains too.
        ({"chief": ["a:1"], "worker": ["b:1"]}, {"type": "chief", "index": 0}, 2),
        ({"chief": ["a:1"], "worker": ["b:1"]}, {"type": "worker", "index": 0}, 2),
        (
            {"chief": ["a:1"], "worker": ["b:1", "c:1"]},
            {"type": "worker", "index": 1},
            3,
        ),
        ({"chief": ["a:1"]}, {"type": "chief", "index": 0}, 1),
        # An evaluator beside them (TFJob, Vertex AI) trains nothing.
        (
            {"chief": ["a:1"], "worker": ["b:1"], "evaluator": ["c:1"]},
            {"type": "worker", "index": 0},
            2,
        ),
        (
            {"chief": ["a:1"], "worker": ["b:1"], "evaluator": ["c:1"]},
            {"type": "evaluator", "index": 0},
            2,
        ),
    ],
)
def test_every_chief_and_worker_counts(cluster, task, tasks):
    text = _tf_config(cluster, task)
    assert training_tasks(text) == tasks
    assert is_evaluator(text) == (task["type"] == "evaluator")


def test_no_tf_config_is_one_process():
    assert training_tasks("") == 1


@pytest.mark.parametrize(
    "text, problem",
    [
        ("{cluster:", "TF_CONFIG is not JSON"),
        ("[1, 2]", "must be a JSON object"),
        (json.dumps({"cluster": {"worker": ["a:1", "b:1"]}}), 'no "task"'),
        (
            _tf_config({"worker": ["a:1", "b:1"]}, {"type": "worker", "index": 2}),
            "task index 2 out of range: the cluster has 2 worker task(s)",
        ),
        (
            _tf_config({"worker": ["a:1", "b:1"]}, {"type": "chief", "index": 0}),
            "task type 'chief' is not in the cluster (worker)",
        ),
        (
            _tf_config(
                {"worker": ["a:1"], "ps": ["b:1"]}, {"type": "worker", "index": 0}
            ),
            "task type(s) ps not supported",
        ),
        (
            _tf_config({"worker": "a:1"}, {"type": "worker", "index": 0}),
            "must map task types to lists",
        ),
        (
            _tf_config({"chief": ["a:1", "b:1"]}, {"type": "chief", "index": 0}),
            "at most one chief",
        ),
        (
            _tf_config({"worker": ["a:1"]}, {"type": "worker", "index": "0"}),
            "task index '0' is not an integer",
        ),
        (
            _tf_config({"evaluator": ["a:1"]}, {"type": "evaluator", "index": 0}),
            "the cluster has no chief or worker task",
        ),
        (
            _tf_config(
                {"worker": ["a:1"], "evaluator": ["b:1", "c:1"]},
                {"type": "worker", "index": 0},
            ),
            "at most one evaluator",
        ),
    ],
)
def test_malformed_tf_config_names_the_problem(text, problem):
    with pytest.raises(ConfigError) as error:
        training_tasks(text)
    assert problem in str(error.value)


def test_t2t_train_answers_a_malformed_tf_config_with_one_line(tmp_path):
    source = tmp_path / "train.en"
    source.write_text("a b\nc d\n")
    # As a user runs it: without TF_CPP_MIN_LOG_LEVEL, which asks for
    # TensorFlow's start-up lines.
    result = run_train(
        f"--model_dir={tmp_path / 'run'}",
        f"--train_src={source}",
        f"--train_tgt={source}",
        env={"TF_CONFIG": "{not json"},
        timeout=300,
        quiet=False,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [lines[-1]] and "Traceback" not in result.stderr
    assert lines[-1].startswith("t2t-train: error: TF_CONFIG is not JSON")


@pytest.mark.slow
def test_t2t_train_as_the_evaluator_task_says_so_and_exits(tmp_path):
    tf_config = _tf_config(
        {"chief": ["a:1"], "worker": ["b:1"], "evaluator": ["c:1"]},
        {"type": "evaluator", "index": 0},
    )
    # No data: the evaluator reads none.
    result = run_train(
        f"--model_dir={tmp_path / 'run'}",
        f"--train_src={tmp_path / 'missing.en'}",
        f"--train_tgt={tmp_path / 'missing.de'}",
        env={"TF_CONFIG": tf_config},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "this task the cluster's evaluator, which has nothing to do" in (
        result.stderr
    )
    assert not (tmp_path / "run").exists()


def test_tasks_that_chose_other_precisions_are_told_to_give_it(monkeypatch):
    import tensorflow as tf

    from t2t_repro.config import TrainingOptions, TransformerConfig
    from t2t_repro.training import distribution, prepare

    seen = {}

    def differing(strategy, facts):
        seen.update(facts)
        return ["the precision"]

    monkeypatch.setattr(distribution, "differing_facts", differing)
    with pytest.raises(ConfigError) as error:
        prepare.check_tasks_agree(
            tf.distribute.MirroredStrategy(["/cpu:0"]),
            TransformerConfig(),
            b"vocabulary",
            TrainingOptions(model_dir="run", mixed_precision="bf16"),
            {"train": [{"path": "/a/train.en", "size": 3, "sha256": "ab"}]},
            7,
        )
    assert str(error.value).startswith("the tasks of this run differ in the precision")
    assert "has step 7, precision bf16" in str(error.value)
    assert str(error.value).endswith("give --mixed_precision (auto chose differently)")
    # Paths may differ between machines; what the files hold may not.
    assert seen["the data files"] == {"train": [{"size": 3, "sha256": "ab"}]}
    assert "model_dir" not in seen["the training flags"]
