"""t2t-score: the log-probabilities of given translations are the training
loss's, and a misaligned pair scores lower than the true one (what
filtering a noisy corpus relies on); the SavedModel's `score` signature
agrees."""

import gzip

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from helpers.margins import teacher_forced_margins
from helpers.processes import run_python
from helpers.toy_run import toy_pairs
from t2t_repro.checkpoints import load_model
from t2t_repro.config import BOS_ID, EOS_ID, PAD_ID, DecodingOptions
from t2t_repro.inference.scoring import Scorer
from t2t_repro.serving import export_saved_model
from t2t_repro.training.losses import evaluation_stats

ALPHA = 1.0  # not the default: the flag must reach the score
# The toy run's first eight training pairs (all different).
PAIRS = [
    (source.decode(), target.decode())
    for source, target in toy_pairs().take(8).as_numpy_iterator()
]
# Each source with the next pair's target.
MISALIGNED = [
    (source, PAIRS[(i + 1) % len(PAIRS)][1]) for i, (source, _) in enumerate(PAIRS)
]
# An empty target (EOS alone), an empty source, a target over the toy
# model's max_length of 32 tokens (cut to 31 and EOS).
ODD = [
    ("ein hund läuft", ""),
    ("", "a dog runs"),
    ("ein hund läuft", " ".join(["a dog runs"] * 20)),
]
ALL = PAIRS + MISALIGNED + ODD


def _score_cli(*flags):
    return run_python(["-m", "t2t_repro.cli", "score", "--progress=false", *flags])


@pytest.fixture(scope="module")
def scored(toy_run_dir, tmp_path_factory):
    """t2t-score's rows for ALL: (log_prob, tokens, per_token, score)."""
    directory = tmp_path_factory.mktemp("score")
    with gzip.open(directory / "src.gz", "wt", encoding="utf-8") as handle:
        handle.write("".join(source + "\n" for source, _ in ALL))
    (directory / "tgt").write_text("".join(target + "\n" for _, target in ALL), "utf-8")
    result = _score_cli(
        f"--model_dir={toy_run_dir}",
        f"--src={directory}/src.gz",
        f"--tgt={directory}/tgt",
        f"--alpha={ALPHA}",
        "--buffer_size=5",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        "1 of 19 pairs had more subword tokens than the model's max_length"
    ) in result.stderr
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    assert len(rows) == len(ALL) and {len(row) for row in rows} == {4}
    return [
        (float(log_prob), int(tokens), float(per_token), float(score))
        for log_prob, tokens, per_token, score in rows
    ]


@pytest.fixture(scope="module")
def model_and_pieces(toy_run_dir):
    """The toy model, and its vocabulary in the Python SentencePiece
    library (not the tf-text op the tool tokenizes with)."""
    model, proto, _ = load_model(toy_run_dir)
    return model, spm.SentencePieceProcessor(model_proto=proto)


def _ids(pieces, text, max_length):
    ids = pieces.encode(text)[: max_length - 1]
    return ids + [EOS_ID]


def _teacher_forced(model, pieces, source, target):
    """(log P(target | source), target tokens): minus the training loss
    without label smoothing, summed, and its token count."""
    length = model.config.max_length
    target_ids = _ids(pieces, target, length)
    logits = model(
        (
            tf.constant([_ids(pieces, source, length)]),
            tf.constant([[BOS_ID] + target_ids[:-1]]),
        ),
        training=False,
    )
    _, loss, tokens = evaluation_stats(tf.constant([target_ids]), logits, 0.0)
    return -float(loss), int(tokens)


def test_scores_are_the_unsmoothed_training_loss(scored, model_and_pieces):
    for (source, target), row in zip(ALL, scored):
        log_prob, tokens = _teacher_forced(*model_and_pieces, source, target)
        assert row[1] == tokens
        np.testing.assert_allclose(
            row,
            [
                log_prob,
                tokens,
                log_prob / tokens,
                log_prob / ((5 + tokens) / 6) ** ALPHA,
            ],
            atol=1e-4,
        )
    assert [row[1] for row in scored[-3:]] == [1, 4, 32]


def _padded(rows):
    width = max(map(len, rows))
    return np.array([row + [PAD_ID] * (width - len(row)) for row in rows], np.int32)


def test_a_misaligned_target_scores_lower_than_the_true_one(scored, model_and_pieces):
    model, pieces = model_and_pieces
    length = model.config.max_length
    margin = teacher_forced_margins(
        model,
        _padded([_ids(pieces, s, length) for s, _ in PAIRS]),
        _padded([_ids(pieces, t, length) for _, t in PAIRS]),
    ).min()
    # Learned robustly: rounding that differs between CPUs changes no
    # comparison below.
    assert margin > 1.0
    true, misaligned = scored[: len(PAIRS)], scored[len(PAIRS) : 2 * len(PAIRS)]
    for right, wrong in zip(true, misaligned):
        # At its first token that differs, a misaligned target has a token
        # the model ranks at least `margin` below the true one (log P <= 0).
        assert wrong[0] <= -margin + 1e-4
        assert wrong[0] < right[0] and wrong[2] < right[2]


def test_misaligned_files_are_one_line_naming_the_line(toy_run_dir, tmp_path):
    (tmp_path / "src").write_text("ein hund\neine katze\nder mann\n")
    (tmp_path / "tgt").write_text("a dog\na cat\n")
    result = _score_cli(
        f"--model_dir={toy_run_dir}", f"--src={tmp_path}/src", f"--tgt={tmp_path}/tgt"
    )
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        f"t2t-score: error: {tmp_path}/tgt has 2 lines but {tmp_path}/src "
        "has 3: parallel files must be line-aligned (first unmatched line: "
        f"{tmp_path}/src:3)"
    )


@pytest.mark.slow  # two tool processes: keeps the default suite within CI's 20 minutes
def test_targets_piped_in_score_as_from_a_file(toy_run_dir, scored, tmp_path):
    """`--tgt=-` (t2t-translate's output piped in, say) is read once: its
    alignment is checked as it is scored, not by a first pass that would
    leave nothing to score."""
    (tmp_path / "src").write_text("".join(source + "\n" for source, _ in ALL), "utf-8")
    targets = "".join(target + "\n" for _, target in ALL)
    flags = (
        f"--model_dir={toy_run_dir}",
        f"--src={tmp_path}/src",
        "--tgt=-",
        "--buffer_size=5",  # the batches `scored` was made in
    )
    result = run_python(
        [
            "-m",
            "t2t_repro.cli",
            "score",
            "--progress=false",
            f"--alpha={ALPHA}",
            *flags,
        ],
        stdin=targets,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    assert [(float(p), int(t), float(n), float(s)) for p, t, n, s in rows] == scored
    result = run_python(
        ["-m", "t2t_repro.cli", "score", "--progress=false", *flags],
        stdin=targets.split("\n", 1)[1],  # one target short
    )
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        f"t2t-score: error: - has {len(ALL) - 1} lines but {tmp_path}/src has "
        f"{len(ALL)}: parallel files must be line-aligned (first unmatched "
        f"line: {tmp_path}/src:{len(ALL)})"
    )


def test_resume_refuses_output_that_is_not_scores(toy_run_dir, tmp_path):
    """Translations in --output (t2t-translate's, say) are not appended to."""
    (tmp_path / "src").write_text("ein hund\neine katze\n")
    (tmp_path / "tgt").write_text("a dog\na cat\n")
    (tmp_path / "out").write_text("-1.000000\t3\t-0.333333\t-1.000000\na cat\n")
    result = _score_cli(
        f"--model_dir={toy_run_dir}",
        f"--src={tmp_path}/src",
        f"--tgt={tmp_path}/tgt",
        f"--output={tmp_path}/out",
        "--resume",
    )
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        f"t2t-score: error: {tmp_path}/out:2: not a line this run would write "
        "(another tool's output, or other flags): resume the interrupted "
        "run's --output with its flags, or drop --resume"
    )
    assert (tmp_path / "out").read_text().endswith("a cat\n")


@pytest.mark.slow  # 85 s here, most of it exporting
def test_the_saved_models_score_signature_scores_alike(toy_run_dir, scored, tmp_path):
    path = export_saved_model(toy_run_dir, str(tmp_path), warmup_requests=0)
    sources = tf.constant([source for source, _ in ALL])
    targets = tf.constant([target for _, target in ALL])
    outputs = tf.saved_model.load(path).signatures["score"](
        inputs=sources, targets=targets, alpha=tf.constant(ALPHA)
    )
    np.testing.assert_allclose(
        outputs["log_probs"], [row[0] for row in scored], atol=1e-4
    )
    np.testing.assert_allclose(outputs["scores"], [row[3] for row in scored], atol=1e-4)
    np.testing.assert_array_equal(outputs["target_tokens"], [row[1] for row in scored])
    np.testing.assert_array_equal(
        outputs["truncated"], [False] * (len(ALL) - 1) + [True]
    )
    results, truncated = Scorer.from_saved_model(
        path, DecodingOptions(alpha=ALPHA)
    ).score([source for source, _ in ALL], [target for _, target in ALL])
    np.testing.assert_allclose(results, scored, atol=1e-4)
    assert truncated == 1
