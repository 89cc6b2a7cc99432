"""A tool's --help lists the flags it reads grouped by topic: the tool's own
flags under its name, then "Checkpoints and run directory", "Data",
"Model", "Training", "Fine-tuning", "Decoding", "Serving limits"; the same
flags, each written as absl writes it, as absl's short help listed
alphabetically under one heading. The options that decide the data order
are listed alike by --allow_option_changes' help and docs/training.md."""

import dataclasses
import os
import re

import pytest

from helpers.processes import REPO, run_python
from t2t_repro.config import (
    DATA_ORDER_OPTIONS,
    DecodingOptions,
    TrainingOptions,
    TransformerConfig,
    flag_name,
    help_of,
)

RUN_DIR = "Checkpoints and run directory"
# An entry's first line: "  --name: help", "  --[no]name: ...", "  -h,--...".
_ENTRY = re.compile(r"^  (?:-\S,)?--(?:\[no\])?([a-z_0-9]+): ")

# absl's short help of the flags the tool reads (the main module's key
# flags, which `common.run` registers): what --help listed before it was
# grouped.
_ABSL_SHORT_HELP = """
import sys
from absl import flags
from t2t_repro.cli import tool_help
tool = sys.argv[1]
__import__(f"t2t_repro.cli.{tool}")
sys.argv = [f"t2t-{tool}"]
tool_help.register_key_flags()
print(flags.FLAGS.main_module_help())
"""


def _flags_of(settings_class):
    return {
        flag_name(field)
        for field in dataclasses.fields(settings_class)
        if "help" in field.metadata
    }


def _entries(lines):
    """{flag name: its entry's text} of consecutive entries."""
    entries, name = {}, None
    for line in lines:
        match = _ENTRY.match(line)
        if match:
            name = match.group(1)
            assert name not in entries, f"--{name} listed twice"
            entries[name] = [line]
        else:
            assert name and line.startswith("    "), line
            entries[name].append(line)
    return {name: "\n".join(text) for name, text in entries.items()}


def _sections(help_text):
    """[(heading, {flag name: entry text})] of a grouped --help."""
    flag_part = help_text.split("\nflags:\n\n", 1)[1]
    flag_part, tail = flag_part.split("\n\nTry --helpfull", 1)
    assert tail == " to get a list of all flags.\n"
    sections = []
    for block in flag_part.split("\n\n"):
        heading, *lines = block.split("\n")
        assert heading.endswith(":") and not heading.startswith(" "), block
        names = [_ENTRY.match(line).group(1) for line in lines if _ENTRY.match(line)]
        assert names == sorted(names), heading  # absl's order, by name
        sections.append((heading[:-1], _entries(lines)))
    return sections


def _absl_entries(tool):
    result = run_python(["-c", _ABSL_SHORT_HELP, tool])
    assert result.returncode == 0, result.stderr[-2000:]
    heading, *lines = result.stdout.strip("\n").split("\n")
    assert heading == f"t2t-{tool}:"
    return _entries(lines)


_EVAL_DATA = {
    "test_src",
    "test_tgt",
    "test_trees",
    "tfds_test_split",
    "tfds_name",
    "tfds_data_dir",
    "tfds_manual_dir",
    "source_lang",
    "target_lang",
}

CASES = {  # tool: (how help is asked for, headings, {flag: heading})
    "eval": (
        "--help",
        ["t2t-eval", RUN_DIR, "Data", "Decoding"],
        {
            "output_dir": "t2t-eval",
            "model_dir": RUN_DIR,
            "checkpoint": RUN_DIR,
            "precision": "Decoding",
            **dict.fromkeys(_EVAL_DATA, "Data"),
            **dict.fromkeys(_flags_of(DecodingOptions), "Decoding"),
        },
    ),
    "translate": (
        "-h",
        ["t2t-translate", RUN_DIR, "Decoding"],
        {
            "input": "t2t-translate",
            "output": "t2t-translate",
            "buffer_size": "t2t-translate",
            "resume": "t2t-translate",
            "n_best": "t2t-translate",
            "saved_model": "t2t-translate",
            "ctranslate2": "t2t-translate",
            "model_dir": RUN_DIR,
            "checkpoint": RUN_DIR,
            "precision": "Decoding",
            **dict.fromkeys(_flags_of(DecodingOptions), "Decoding"),
        },
    ),
    "train": (
        "--helpshort",
        [RUN_DIR, "Data", "Model", "Training", "Fine-tuning", "Decoding"],
        {
            "model_dir": RUN_DIR,
            "average_last": RUN_DIR,
            "train_src": "Data",
            "dev_tgt": "Data",
            "test_trees": "Data",
            "tfds_name": "Data",
            "spm_model_type": "Data",
            "num_layers": "Model",
            "cpu_devices": "Training",
            "collective_timeout": "Training",
            "init_from": "Fine-tuning",
            "init_optimizer_slots": "Fine-tuning",
            **dict.fromkeys(_flags_of(TransformerConfig), "Model"),
            **dict.fromkeys(_flags_of(TrainingOptions), "Training"),
            **dict.fromkeys(_flags_of(DecodingOptions), "Decoding"),
        },
    ),
}


@pytest.mark.parametrize("tool", sorted(CASES))
def test_help_lists_the_flags_it_read_before_grouped_by_topic(tool):
    asked, headings, topics = CASES[tool]
    result = run_python(["-m", "t2t_repro.cli", tool, asked])
    assert result.returncode == 1, result.stderr[-2000:]  # absl's, for help
    assert result.stdout.startswith(f"t2t-{tool}:")  # the docstring
    sections = _sections(result.stdout)
    assert [heading for heading, _ in sections] == headings
    heading_of = {name: heading for heading, entries in sections for name in entries}
    assert {name: heading_of.get(name) for name in topics} == topics
    # Not a flag lost, added or written otherwise than absl wrote it.
    listed = {name: text for _, entries in sections for name, text in entries.items()}
    assert listed == _absl_entries(tool)
    if tool == "eval":  # the flags t2t-eval reads, and no training flag
        assert set(listed) == set(topics)


def test_the_help_and_the_docs_list_the_data_order_options():
    *settings, replicas, pipelines = DATA_ORDER_OPTIONS
    # training.json's replica and worker counts
    assert (replicas, pipelines) == ("replicas", "input_pipelines")
    flags = [f"--{name}" for name in settings]
    [allow] = [
        field
        for field in dataclasses.fields(TrainingOptions)
        if field.name == "allow_option_changes"
    ]
    assert help_of(allow).startswith(
        f"Resume even if {', '.join(flags)} or the replica or worker count changed "
    )
    with open(os.path.join(REPO, "docs", "training.md"), encoding="utf-8") as handle:
        page = " ".join(handle.read().split())
    [listed] = re.findall(r"changes the data order \(([^)]*)\)", page)
    assert re.findall(r"`(--\w+)`", listed) == flags
    assert listed.endswith(" or the replica or worker count")
