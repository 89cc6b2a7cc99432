"""The bad-input matrix: each tool given a kind of bad input, and the one
line it must answer with (tests/cli/test_bad_input.py runs it).

    PYTHONPATH=tests python tests/helpers/bad_inputs.py RUN_DIR

prints the matrix with the messages observed, the rows of the "Bad input"
table of docs/reliability.md (RUN_DIR: any trained run directory), and
exits with status 1 if a tool's exit status was not 2.
"""

import dataclasses
import gzip
import json
import os
import shlex
import shutil
import sys
import tempfile

from helpers.processes import run_python
from helpers.vocab_for_tests import tiny_vocab
from t2t_repro.averaging import average_checkpoints


@dataclasses.dataclass(frozen=True)
class BadInput:
    tool: str
    problem: str
    # {d}: the files' directory, {run}: a trained run, {m}: a new directory
    # of the case's own (cases run at once, and t2t-train locks its
    # model_dir: two trainers on one would fail with the lock's message).
    flags: tuple
    expected: str  # in the error line, after the same substitutions


def write_files(directory, run_dir):
    """The bad files, a copy of `run_dir` whose config.json no longer
    fits its checkpoints, and the damaged copies of `write_damaged_runs`."""
    files = {
        "three.en": b"a b\nc d\ne f\n",
        "three.de": b"x\ny\nz\n",
        "two.de": b"x\ny\n",
        "blank.en": b" \n\t\n  \n",
        "empty.en": b"",
        "bad_utf8.en": b"ok\n\xff\xfe bad\nok\n",
        "bad.trees": b"(S (NP (NN a)) (VP (VB b)))\n(S (NP (NN a)\n",
        "same.en": b"a b\n",
        "same.de": b"x\n",
        "latin1.cfg": b"# \xdcbersetzung\n--d_model=64\n",
        "outer.cfg": f"--flagfile={directory}/latin1.cfg\n".encode(),
        "corrupt.en.gz": damaged_gzip(),
    }
    for name, data in files.items():
        with open(os.path.join(directory, name), "wb") as handle:
            handle.write(data)
    os.mkfifo(os.path.join(directory, "pipe.en"))  # never opened by the tools
    # Not a SavedModel: a tool must refuse to write in it before reading it.
    os.mkdir(os.path.join(directory, "export"))
    with open(os.path.join(directory, "export", "saved_model.pb"), "wb") as handle:
        handle.write(b"kept")
    shutil.copytree(run_dir, os.path.join(directory, "averaged_run"))
    average_checkpoints(
        os.path.join(directory, "averaged_run"), os.path.join(directory, "average"), 1
    )
    refit = os.path.join(directory, "refit")
    shutil.copytree(run_dir, refit)
    config = os.path.join(refit, "config.json")
    with open(config) as handle:
        text = handle.read()
    with open(config, "w") as handle:
        handle.write(text.replace('"d_ff": ', '"d_ff": 1'))
    write_damaged_runs(directory, run_dir)


# Fewer pieces than the toy run's vocabulary has (its words fill 41).
OTHER_VOCAB_SIZE = 30


def damaged_gzip():
    """A gzip file whose header is intact and whose compressed data is
    damaged mid-stream (zlib's error, not gzip's)."""
    data = bytearray(
        gzip.compress("".join(f"line {i}\n" for i in range(20000)).encode(), mtime=0)
    )
    data[3000:3064] = b"\xff" * 64
    return bytes(data)


def _truncate(path, keep):
    with open(path, "r+b") as handle:
        handle.truncate(int(os.path.getsize(path) * keep))


def write_damaged_runs(directory, run_dir):
    """Copies of `run_dir` as {d}/damaged/NAME, each with one run file
    damaged, and {d}/resume.cfg, flags that resume any of them: its
    model's, a training file, and --allow_option_changes (a case must reach
    its damaged file whatever options the run was trained with)."""
    with open(os.path.join(run_dir, "config.json")) as handle:
        config = json.load(handle)
    with open(os.path.join(directory, "resume.cfg"), "w") as handle:
        handle.writelines(f"--{key}={value}\n" for key, value in config.items())
        handle.write(
            f"--train_src={directory}/three.en\n"
            f"--train_tgt={directory}/three.de\n"
            "--allow_option_changes\n--train_steps=1\n"
        )
    with open(os.path.join(run_dir, "checkpoint")) as handle:
        newest = handle.readline().split('"')[1]
    scores = {
        "evaluations": [{"step": 1, "bleu": 1.0, "minutes": 0.1}],
        "best": [],
        "stopped_early_at": None,
    }
    outside = {**scores, "best": [{"step": 10**9, "bleu": 9.0, "path": "../victim"}]}
    # NAME: (file, fraction of it kept, or the JSON object written in it).
    damages = {
        "config_empty": ("config.json", 0),
        "config_half": ("config.json", 0.5),
        "config_unknown_key": ("config.json", {**config, "d_modle": 1}),
        "training_empty": ("training.json", 0),
        "training_half": ("training.json", 0.5),
        "scores_empty": ("best/scores.json", 0),
        "scores_half": ("best/scores.json", 0.5),
        "scores_outside": ("best/scores.json", outside),
        "spm_empty": ("spm.model", 0),
        "spm_half": ("spm.model", 0.5),
        "list_empty": ("checkpoint", 0),
        "index_half": (f"{newest}.index", 0.5),
        "data_half": (f"{newest}.data-00000-of-00001", 0.5),
    }
    for name, (file, damage) in damages.items():
        copy = os.path.join(directory, "damaged", name)
        shutil.copytree(run_dir, copy)
        path = os.path.join(copy, file)
        if file.startswith("best/"):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as handle:
                json.dump(scores, handle)
        if isinstance(damage, dict):
            with open(path, "w") as handle:
                json.dump(damage, handle)
        else:
            _truncate(path, damage)
    # An intact vocabulary of another size, as if copied from another run.
    copy = os.path.join(directory, "damaged", "spm_other")
    shutil.copytree(run_dir, copy)
    with open(os.path.join(copy, "spm.model"), "wb") as handle:
        handle.write(tiny_vocab(OTHER_VOCAB_SIZE))


# A run with one file damaged, {d}/damaged/NAME (see write_damaged_runs):
# (problem, NAME, the error line's end after {d}/damaged/NAME/, the tools
# given it). t2t-eval reads neither training.json nor best/scores.json.
_DAMAGED_RUNS = [
    (
        "config.json empty",
        "config_empty",
        "config.json: corrupt (empty file)",
        ("train", "eval"),
    ),
    (
        "config.json cut in half",
        "config_half",
        "config.json: corrupt (not JSON: ",
        ("train", "eval"),
    ),
    (
        "config.json with an unknown key",
        "config_unknown_key",
        "config.json: unknown key 'd_modle'",
        ("train", "eval"),
    ),
    (
        "training.json empty",
        "training_empty",
        "training.json: corrupt (empty file)",
        ("train",),
    ),
    (
        "training.json cut in half",
        "training_half",
        "training.json: corrupt (not JSON: ",
        ("train",),
    ),
    (
        "best/scores.json empty",
        "scores_empty",
        "best/scores.json: corrupt (empty file)",
        ("train",),
    ),
    (
        "best/scores.json cut in half",
        "scores_half",
        "best/scores.json: corrupt (not JSON: ",
        ("train", "average"),
    ),
    (
        "best/scores.json naming ../victim",
        "scores_outside",
        "best/scores.json: names checkpoint '../victim', outside "
        "{d}/damaged/scores_outside/best",
        ("train",),
    ),
    (
        "spm.model empty",
        "spm_empty",
        "spm.model: corrupt (empty file)",
        ("train", "eval"),
    ),
    (
        "spm.model cut in half",
        "spm_half",
        "spm.model: corrupt (not a SentencePiece model)",
        ("train", "eval"),
    ),
    (
        "checkpoint list empty",
        "list_empty",
        "checkpoint: corrupt (not a list of checkpoints)",
        ("train", "eval"),
    ),
    (
        "spm.model of another run",
        "spm_other",
        f"spm.model: {OTHER_VOCAB_SIZE} pieces, but "
        "{d}/damaged/spm_other/config.json has vocab_size=",
        ("eval", "translate"),
    ),
    # ckpt-200: the toy run's newest (t2t-train resumes from the one before
    # it: see test_reliability.py).
    (
        "newest checkpoint's .index cut in half",
        "index_half",
        "ckpt-200: corrupt checkpoint (",
        ("eval", "translate"),
    ),
    (
        "newest checkpoint's .data cut in half",
        "data_half",
        "ckpt-200: corrupt checkpoint (",
        ("eval", "export"),
    ),
]
# Each tool's flags besides --model_dir.
_FLAGS_WITH_A_RUN = {
    "train": ("--flagfile={d}/resume.cfg",),
    "eval": ("--test_src={d}/three.en", "--test_tgt={d}/three.de"),
    "translate": ("--input={d}/three.en",),
    "export": ("--export_dir={m}",),
    "average": ("--output_dir={m}", "--select=best", "--num_checkpoints=1"),
}


def _train_on(source, target, *more):
    """t2t-train's flags for a new run on {d}/SOURCE and {d}/TARGET."""
    return " ".join(
        (
            "--model_dir={m}",
            f"--train_src={{d}}/{source}",
            f"--train_tgt={{d}}/{target}",
        )
        + more
    )


_TEST_ON_THREE = "--test_src={d}/three.en --test_tgt={d}/three.de"
# {tool: [(problem, flags as a shell splits them, expected)]}
_ROWS = {
    "train": [
        (
            "missing file",
            _train_on("missing.en", "three.de"),
            "{d}/missing.en: no such file",
        ),
        # Checked before training: not "no such file" after the whole run.
        (
            "missing test file",
            _train_on(
                "three.en",
                "three.de",
                "--test_src={d}/three.en --test_tgt={d}/missing.de",
            ),
            "{d}/missing.de: no such file",
        ),
        (
            "test files not line-aligned",
            _train_on(
                "three.en", "three.de", "--test_src={d}/three.en --test_tgt={d}/two.de"
            ),
            "{d}/two.de has 2 lines but {d}/three.en has 3",
        ),
        (
            "TFDS without a direction",
            "--model_dir={m} --tfds_name=wmt14_translate/de-en",
            "--tfds_name=wmt14_translate/de-en needs --source_lang and --target_lang",
        ),
        (
            "mismatched lines",
            _train_on("three.en", "two.de"),
            "{d}/two.de has 2 lines but {d}/three.en has 3: parallel files "
            "must be line-aligned (first unmatched line: {d}/three.en:3)",
        ),
        ("empty file", _train_on("empty.en", "empty.en"), "{d}/empty.en: empty file"),
        (
            "whitespace-only lines",
            _train_on("blank.en", "three.de"),
            "every one of the 3 lines has an empty (or whitespace-only) side",
        ),
        (
            "invalid UTF-8",
            _train_on("bad_utf8.en", "three.de"),
            "{d}/bad_utf8.en:2: not valid UTF-8",
        ),
        (
            "no pair fits --max_length",
            # A vocabulary the 6 sentences fill: no warning before the error.
            _train_on("three.en", "three.de", "--max_length=1 --vocab_size=20"),
            "{d}/three.en: no pair fits --max_length=1",
        ),
        (
            "unknown flag",
            "--model_dir={m} --no_such=1",
            "Unknown command line flag 'no_such'",
        ),
        (
            "contradictory flags",
            _train_on("three.en", "three.de", "--keep_best=2"),
            "--keep_best and --patience rank checkpoints by dev BLEU: give "
            "--dev_src/--dev_tgt or --tfds_name",
        ),
        (
            "--init_optimizer_slots alone",
            _train_on("three.en", "three.de", "--init_optimizer_slots"),
            "--init_optimizer_slots takes the Adam moments of --init_from's "
            "checkpoint: give --init_from",
        ),
        (
            "--init_from a damaged checkpoint, with its Adam moments",
            _train_on(
                "three.en",
                "three.de",
                "--init_from={d}/damaged/index_half/ckpt-200 --init_optimizer_slots",
            ),
            "--init_from={d}/damaged/index_half/ckpt-200: ",
        ),
        (
            "ill-formed tree",
            "--model_dir={m} --train_trees={d}/bad.trees",
            "{d}/bad.trees:2: not a bracketed tree",
        ),
        (
            "treebank and text files",
            _train_on("three.en", "three.de", "--train_trees={d}/bad.trees"),
            "--train_trees (parsing) or --train_src (translation), not both",
        ),
        (
            "impossible model",
            _train_on("three.en", "three.de", "--d_model=30 --num_heads=4"),
            "d_model=30 is not divisible by num_heads=4",
        ),
        (
            "gzip damaged mid-stream",
            _train_on("corrupt.en.gz", "three.de"),
            "{d}/corrupt.en.gz: cannot be read: Error -3 while decompressing data",
        ),
        (
            "a pipe as a training file",
            _train_on("pipe.en", "three.de"),
            "{d}/pipe.en: stdin, a pipe or a device, which can be read only once",
        ),
        (
            "an average as --model_dir",
            "--model_dir={d}/average --flagfile={d}/resume.cfg",
            "{d}/average: an average of a run's checkpoints (averaged.json), "
            "not a training run",
        ),
        (
            "unwritable model_dir",
            "--model_dir=/proc/t2t_run --train_src={d}/three.en "
            "--train_tgt={d}/three.de",
            "/proc/t2t_run: No such file or directory",
        ),
    ],
    "eval": [
        (
            "not a run directory",
            f"--model_dir={{d}}/nothing {_TEST_ON_THREE}",
            "{d}/nothing/config.json: not found; is {d}/nothing a t2t-train model_dir?",
        ),
        (
            "mismatched lines",
            "--model_dir={run} --test_src={d}/three.en --test_tgt={d}/two.de",
            "parallel files must be line-aligned",
        ),
        (
            "checkpoint does not fit config.json",
            f"--model_dir={{d}}/refit {_TEST_ON_THREE}",
            "does not fit {d}/refit/config.json: ",
        ),
        (
            "unwritable output_dir",
            f"--model_dir={{run}} {_TEST_ON_THREE} --output_dir=/proc/t2t_eval",
            "/proc/t2t_eval: No such file or directory",
        ),
    ],
    "translate": [
        (
            "missing --saved_model",
            "--saved_model={d}/nothing --input={d}/three.en",
            "{d}/nothing: no SavedModel there (no saved_model.pb)",
        ),
        (
            "missing --input",
            "--model_dir={run} --input={d}/missing.en",
            "{d}/missing.en: no such file",
        ),
        (
            "invalid UTF-8",
            "--model_dir={run} --input={d}/bad_utf8.en",
            "{d}/bad_utf8.en:2: not valid UTF-8",
        ),
        (
            "missing --checkpoint",
            "--model_dir={run} --checkpoint={run}/ckpt-99999 --input={d}/three.en",
            "{run}/ckpt-99999: no such checkpoint",
        ),
        (
            "contradictory flags",
            "--model_dir={run} --saved_model={d} --input={d}/three.en",
            "give exactly one of --model_dir, --saved_model and --ctranslate2",
        ),
        (
            "not a CTranslate2 export",
            "--ctranslate2={d} --input={d}/three.en",
            "{d}: not a t2t-export --format=ctranslate2 directory",
        ),
        (
            "--output is --input",
            "--model_dir={run} --input={d}/same.en --output={d}/same.en",
            "{d}/same.en: --output is also --input, which writing it would "
            "destroy; give another --output",
        ),
        (
            "--output is the run's spm.model",
            "--model_dir={d}/averaged_run --input={d}/three.en "
            "--output={d}/averaged_run/spm.model",
            "{d}/averaged_run/spm.model: --output is one of the files of "
            "--model_dir={d}/averaged_run, which writing it would destroy",
        ),
        (
            "--output in the --saved_model",
            "--saved_model={d}/export --input={d}/three.en "
            "--output={d}/export/saved_model.pb",
            "{d}/export/saved_model.pb: --output is one of the files of "
            "--saved_model={d}/export",
        ),
        (
            "unwritable --output",
            "--model_dir={run} --input={d}/three.en --output=/proc/t2t/out.txt",
            "/proc/t2t/out.txt: No such file or directory",
        ),
    ],
    "export": [
        (
            "not a run directory",
            "--model_dir={d}/nothing --export_dir={d}/export",
            "{d}/nothing/config.json: not found",
        ),
        (
            "unwritable --export_dir",
            "--model_dir={run} --export_dir=/proc/t2t_export",
            "/proc/t2t_export",
        ),
        (
            "--quantization without CTranslate2",
            "--model_dir={run} --export_dir={d}/export --quantization=int8",
            "--quantization is for --format=ctranslate2",
        ),
        (
            "--version with CTranslate2",
            "--model_dir={run} --export_dir={d}/ct2 --format=ctranslate2 --version=3",
            "--version is for SavedModels (TF Serving's version directories)",
        ),
        (
            "SavedModel settings with CTranslate2",
            "--model_dir={run} --export_dir={d}/ct2 --format=ctranslate2 "
            "--beam_size=5 --max_beam_size=8 --decode_batch_tokens=100",
            "--beam_size, --max_beam_size: a SavedModel's settings, which a "
            "CTranslate2 model does not hold; give the decoding flags to "
            "t2t-translate --ctranslate2",
        ),
    ],
    "average": [
        (
            "fewer checkpoints than asked",
            "--model_dir={run} --output_dir={m} --num_checkpoints=99",
            "cannot average the last 99",
        ),
        (
            "checkpoint does not fit config.json",
            "--model_dir={d}/refit --output_dir={m} --num_checkpoints=1",
            "does not fit {d}/refit/config.json: ",
        ),
    ],
    "score": [
        (
            "--src and --tgt both stdin",
            "--model_dir={run} --src=- --tgt=-",
            "--src=- and --tgt=- are one stream, which cannot be read as both",
        ),
        (
            "--src and --tgt stdin by two names",
            "--model_dir={run} --src=- --tgt=/dev/stdin",
            "--src=- and --tgt=/dev/stdin are one stream",
        ),
        (
            "empty file",
            "--model_dir={run} --src={d}/empty.en --tgt={d}/empty.en",
            "{d}/empty.en: empty file: nothing to score",
        ),
        (
            "--output is the run's config.json",
            "--model_dir={d}/averaged_run --src={d}/same.en --tgt={d}/same.de "
            "--output={d}/averaged_run/config.json",
            "{d}/averaged_run/config.json: --output is one of the files of "
            "--model_dir={d}/averaged_run",
        ),
        (
            "--output is --tgt",
            "--model_dir={run} --src={d}/same.en --tgt={d}/same.de "
            "--output={d}/same.de",
            "{d}/same.de: --output is also --tgt",
        ),
    ],
    "fetch": [
        (
            "--base_url not a URL",
            "multi30k --data_dir={m} --splits=val --langs=en --base_url={d}/raw",
            "{d}/raw: not a URL (http://, https:// or file://)",
        ),
    ],
    "attention": [
        (
            "not a run directory",
            "--model_dir={d}/nothing '--sentence=a b'",
            "{d}/nothing/config.json: not found",
        ),
        (
            "--heads not indices",
            "--model_dir={run} '--sentence=a b' --heads=a",
            "--heads=a: give comma-separated indices, e.g. --heads=0,1",
        ),
        (
            "--layers out of range",
            "--model_dir={run} '--sentence=a b' --layers=7",
            "--layers=7: [7] out of range",
        ),
        (
            "--queries out of range",
            "--model_dir={run} '--sentence=a b' --style=lines --queries=40",
            "--queries=40: [40] out of range; its encoder_self attention",
        ),
        (
            "empty --sentence",
            "--model_dir={run} '--sentence= '",
            "--sentence=' ': nothing to translate (no subword tokens); no attention",
        ),
    ],
    "summary": [
        (
            "impossible model",
            "--d_model=30",
            "d_model=30 is not divisible by num_heads=8",
        ),
        (
            "flagfile not UTF-8",
            "--flagfile={d}/outer.cfg",
            "{d}/latin1.cfg:1: not valid UTF-8 (byte 2)",
        ),
    ],
}

CASES = [
    *(
        BadInput(tool, problem, tuple(shlex.split(flags)), expected)
        for tool, rows in _ROWS.items()
        for problem, flags, expected in rows
    ),
    *(
        BadInput(
            tool,
            problem,
            (f"--model_dir={{d}}/damaged/{name}", *_FLAGS_WITH_A_RUN[tool]),
            f"{{d}}/damaged/{name}/{expected}",
        )
        for problem, name, expected, tools in _DAMAGED_RUNS
        for tool in tools
    ),
]


# The cases the default suite runs: one per kind of check and tool (a
# process each, most of it TensorFlow's import); `-m slow` runs them all.
DEFAULT_SUITE = {
    ("train", "mismatched lines"),
    ("train", "invalid UTF-8"),
    ("train", "missing test file"),
    ("train", "contradictory flags"),
    ("train", "config.json cut in half"),
    ("eval", "checkpoint does not fit config.json"),
    ("translate", "missing --checkpoint"),
    ("export", "unwritable --export_dir"),
    ("export", "--version with CTranslate2"),
    ("export", "SavedModel settings with CTranslate2"),
    ("train", "an average as --model_dir"),
    ("translate", "--output is --input"),
    ("eval", "spm.model of another run"),
    ("average", "fewer checkpoints than asked"),
    ("average", "checkpoint does not fit config.json"),
    ("attention", "--layers out of range"),
    ("summary", "impossible model"),
    ("summary", "flagfile not UTF-8"),
    ("fetch", "--base_url not a URL"),
}
assert DEFAULT_SUITE <= {(c.tool, c.problem) for c in CASES}


def suite(case):
    """The suite that runs `case`: "default" or "slow"."""
    return "default" if (case.tool, case.problem) in DEFAULT_SUITE else "slow"


_DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "reliability.md")
_DOCS_HEADER = "| tool | bad input | message (exit status 2) | suite |"


def as_documented(line, directory, run_dir):
    """An error line as docs/reliability.md quotes it: the directories
    named DIR and RUN."""
    return line.replace(directory, "DIR").replace(run_dir, "RUN")


def documented_rows():
    """[((tool, problem), (message, suite))] of docs/reliability.md's "Bad
    input" table, in its order, "t2t-" left off the tool."""
    with open(_DOCS, encoding="utf-8") as handle:
        table = handle.read().split(_DOCS_HEADER)[1].split("\n\n")[0]
    rows = []
    for line in table.strip().splitlines()[1:]:
        tool, problem, rest = line.strip().removeprefix("| ").split(" | ", 2)
        message, row_suite = rest.removesuffix(" |").rsplit(" | ", 1)
        rows.append(
            ((tool.removeprefix("t2t-"), problem), (message.strip("`"), row_suite))
        )
    return rows


def fill(text, directory, run_dir):
    return text.replace("{d}", directory).replace("{run}", run_dir)


def run_case(case, directory, run_dir):
    """(exit status, stderr) of the tool given the case's flags."""
    own = tempfile.mkdtemp(dir=directory)
    flags = [fill(f, directory, run_dir).replace("{m}", own) for f in case.flags]
    # As a user runs it (TF_CPP_MIN_LOG_LEVEL would ask for TensorFlow's
    # own lines).
    # Stdin empty, not the test runner's (a terminal, or closed).
    result = run_python(
        ["-m", "t2t_repro.cli", case.tool, *flags], stdin="", timeout=300, quiet=False
    )
    return result.returncode, result.stderr


def main(run_dir):
    print(f"{_DOCS_HEADER}\n|---|---|---|---|")
    failed = 0
    with tempfile.TemporaryDirectory() as directory:
        write_files(directory, run_dir)
        for case in CASES:
            status, stderr = run_case(case, directory, run_dir)
            line = as_documented(stderr.strip().splitlines()[-1], directory, run_dir)
            print(f"| t2t-{case.tool} | {case.problem} | `{line}` | {suite(case)} |")
            if status != 2:
                print(
                    f"t2t-{case.tool}, {case.problem}: exit status {status}",
                    file=sys.stderr,
                )
                failed = 1
    return failed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
