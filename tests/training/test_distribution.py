"""TF_CONFIG: which layouts train together, and one-line errors for bad ones."""

import json

import pytest

from helpers.train_command import run_train
from t2t_repro.config import PRECISIONS, ConfigError
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


def _agree_with_a_second_task(monkeypatch, second, **settings):
    """`agreed_with_the_other_tasks` in a two-task run whose other task
    (the chief, gathered first) differs from this one by `second`
    ({fact name: its number}); the facts' numbers of this task too."""
    import tensorflow as tf

    from t2t_repro.config import TrainingOptions, TransformerConfig
    from t2t_repro.training import distribution, prepare

    numbers = {}

    def gathered(strategy, own):
        numbers.update(own)
        return {
            name: [second.get(name, value), value]
            for name, value in sorted(own.items())
        }

    monkeypatch.setattr(
        distribution, "input_context", lambda strategy: tf.distribute.InputContext(2)
    )
    monkeypatch.setattr(distribution, "task_name", lambda strategy: "worker 0")
    monkeypatch.setattr(distribution, "gathered_from_tasks", gathered)
    arguments = {
        "strategy": None,
        "model_config": TransformerConfig(),
        "vocab_proto": b"vocabulary",
        "options": TrainingOptions(model_dir="run", mixed_precision="fp32"),
        "requested": "auto",
        "data": {"train": [{"path": "/a/train.en", "size": 3, "sha256": "ab"}]},
        "step": 7,
        "task_facts": None,
        **settings,
    }
    return prepare.agreed_with_the_other_tasks(**arguments), numbers


def test_auto_precision_takes_the_chiefs_choice_on_every_task(monkeypatch):
    chief_chose_bf16 = {"the precision chosen": PRECISIONS.index("bf16")}
    options, _ = _agree_with_a_second_task(monkeypatch, chief_chose_bf16)
    assert options.mixed_precision == "bf16"


def test_tasks_that_differ_are_named_with_this_tasks_values(monkeypatch):
    _, numbers = _agree_with_a_second_task(monkeypatch, {})
    other = {
        "--train_steps": numbers["--train_steps"] + 1,
        "the restored step": 9,
        "the data files": numbers["the data files"] + 1,
    }
    with pytest.raises(ConfigError) as error:
        _agree_with_a_second_task(monkeypatch, other)
    assert str(error.value).startswith(
        "the tasks of this run differ in --train_steps, the data files, the "
        "restored step (this task is worker 0; --train_steps=100000; restored "
        "steps 9, 7, the chief's first): start every task with the same flags"
    )


def test_data_at_other_paths_is_the_same_data(monkeypatch):
    moved = {"train": [{"path": "/b/train.en", "size": 3, "sha256": "ab"}]}
    changed = {"train": [{"path": "/a/train.en", "size": 3, "sha256": "cd"}]}
    _, here = _agree_with_a_second_task(monkeypatch, {})
    _, there = _agree_with_a_second_task(monkeypatch, {}, data=moved)
    _, other = _agree_with_a_second_task(monkeypatch, {}, data=changed)
    assert here["the data files"] == there["the data files"] != other["the data files"]
    assert "--model_dir" not in here
