"""docs/your_own_data.md, run as written: every line of its ```sh blocks,
in order, from a directory holding a small English->Portuguese corpus in
`my_data/` and `flags` linked to the repository's flags/.

Each t2t-train command gets overrides appended that make it take seconds
(a tiny model, 40 steps; absl lets the later flag win). The test checks
that every command exits 0, that the export holds a SavedModel and that
t2t-translate wrote one line per input line. It does not check what the
model learned: 40 steps are too few. Blocks marked other than ```sh (output,
commands that need a network or an extra package) are not run."""

import os
import random
import re
import shlex
import subprocess

import pytest

from helpers.processes import REPO, quiet_environment

PAGE = os.path.join(REPO, "docs", "your_own_data.md")
FLAGS_DIR = os.path.join(REPO, "flags")

_SH_BLOCK = re.compile(r"^```sh\n(.*?)^```$", re.MULTILINE | re.DOTALL)

# Appended to every t2t-train command of the page.
FAST = (
    "--vocab_size=200",
    "--d_model=32",
    "--d_ff=64",
    "--num_layers=1",
    "--num_heads=2",
    "--train_steps=40",
    "--warmup_steps=10",
    "--cooldown_steps=0",
    "--eval_every=40",
    "--checkpoint_every=40",
    "--batch_tokens=512",
    "--mixed_precision=fp32",
)

# A word-for-word English->Portuguese dictionary: enough to learn from,
# and a language pair the recipes were not written for.
_WORDS = {
    "the": "o",
    "a": "um",
    "dog": "cão",
    "cat": "gato",
    "man": "homem",
    "boy": "menino",
    "horse": "cavalo",
    "bird": "pássaro",
    "runs": "corre",
    "sleeps": "dorme",
    "eats": "come",
    "sees": "vê",
    "jumps": "salta",
    "big": "grande",
    "small": "pequeno",
    "red": "vermelho",
    "black": "preto",
    "old": "velho",
    "in": "em",
    "on": "sobre",
    "park": "parque",
    "street": "rua",
    "grass": "relva",
    "house": "casa",
    "and": "e",
    "today": "hoje",
    "now": "agora",
    "here": "aqui",
}
_SUBJECTS = ["dog", "cat", "man", "boy", "horse", "bird"]
_ADJECTIVES = ["big", "small", "red", "black", "old"]
_VERBS = ["runs", "sleeps", "eats", "sees", "jumps"]
_PLACES = ["park", "street", "grass", "house"]


def _sentence(rng):
    words = [rng.choice(["the", "a"])]
    if rng.random() < 0.5:
        words.append(rng.choice(_ADJECTIVES))
    words += [rng.choice(_SUBJECTS), rng.choice(_VERBS)]
    if rng.random() < 0.6:
        words += [rng.choice(["in", "on"]), "the", rng.choice(_PLACES)]
    if rng.random() < 0.3:
        words.append(rng.choice(["today", "now", "here"]))
    return words


def write_corpus(directory, seed=0):
    """my_data/{train,dev,test}.{en,pt}: 400, 12 and 12 aligned lines (few
    to decode: beam search over them is most of t2t-eval's time)."""
    rng = random.Random(seed)
    os.makedirs(os.path.join(directory, "my_data"))
    for split, size in (("train", 400), ("dev", 12), ("test", 12)):
        sentences = [_sentence(rng) for _ in range(size)]
        for lang, words_of in (
            ("en", lambda s: s),
            ("pt", lambda s: [_WORDS[w] for w in s]),
        ):
            path = os.path.join(directory, "my_data", f"{split}.{lang}")
            with open(path, "w", encoding="utf-8") as handle:
                handle.writelines(" ".join(words_of(s)) + "\n" for s in sentences)


def page_commands(text):
    """The lines of the page's ```sh blocks, in order, without blank lines
    and comments."""
    commands = []
    for block in _SH_BLOCK.findall(text):
        for line in block.splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                assert not line.endswith("\\"), f"one command per line, please: {line}"
                commands.append(line)
    return commands


def _flag(words, name):
    values = [w.split("=", 1)[1] for w in words if w.startswith(f"--{name}=")]
    return values[-1] if values else None


def _lines(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read().splitlines()


def run_page(directory, flags_dir=FLAGS_DIR):
    """Runs the page's commands in `directory`; returns (command, its
    CompletedProcess) for each."""
    os.symlink(flags_dir, os.path.join(directory, "flags"))
    with open(PAGE, encoding="utf-8") as page:
        commands = page_commands(page.read())
    assert any(c.startswith("t2t-train ") for c in commands)
    results = []
    for command in commands:
        written = command
        if command.startswith("t2t-train "):
            assert not re.search(r"[<>|;&]", command), command
            command = " ".join([command, *FAST])
        result = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", command],
            cwd=directory,
            env=quiet_environment(),
            capture_output=True,
            text=True,
            # Each command takes seconds alone; an overloaded CI machine
            # (two test workers and their TensorFlow threads) runs it far slower.
            timeout=600,
        )
        assert result.returncode == 0, (
            f"{command}\nexit {result.returncode}\n{result.stderr[-3000:]}"
        )
        results.append((written, result))
    return results


@pytest.mark.slow
@pytest.mark.timeout(2400)  # the page's commands, each up to 600 s
def test_the_page_takes_a_new_language_pair_to_an_exported_model(tmp_path):
    write_corpus(str(tmp_path))
    translated = exported = 0
    for command, result in run_page(str(tmp_path)):
        words = shlex.split(command)
        tool = words[0] if words[0].startswith("t2t-") else None
        if tool == "t2t-eval":
            assert result.stdout.startswith("sacreBLEU "), result.stdout
        if "t2t-translate" in words and not _flag(words, "output"):
            assert result.stdout.strip(), command  # translated to stdout
        if tool == "t2t-translate" and _flag(words, "output"):
            source = _lines(tmp_path / _flag(words, "input"))
            output = _lines(tmp_path / _flag(words, "output"))
            assert len(output) == len(source) > 0
            translated += 1
        if tool == "t2t-export":
            base = tmp_path / _flag(words, "export_dir")
            versions = os.listdir(base)
            assert versions and all(
                (base / v / "saved_model.pb").exists() for v in versions
            )
            exported += 1
    assert translated and exported
