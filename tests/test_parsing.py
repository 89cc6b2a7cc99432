"""The parsing task (paper section 6.3): linearisation, repair of
ill-formed output, EVALB scoring against hand-computed examples, the
treebank reader's errors, and a short training run on a toy treebank."""

import json
import random
import re

import pytest
from nltk import Tree

from helpers.processes import run_python
from helpers.toy_treebank import toy_tree, write_treebank
from t2t_repro.data import DataError
from t2t_repro.parsing import (
    BracketScores,
    delinearize,
    labelled_brackets,
    linearize,
    read_trees,
    score_parses,
    tagged_words,
    tree_of_linearisation,
)


def _score(gold, hypothesis):
    return score_parses([hypothesis], [Tree.fromstring(gold)])


def test_linearisation_is_vinyals_style_without_root_traces_and_functions():
    tree = Tree.fromstring(
        "( (S (NP-SBJ-1 (DT The) (NN dog)) (VP (VBZ barks) (S (NP (-NONE- "
        "*-1)) (VP (TO to) (VP (VB play))))) (. .)))"
    )
    assert linearize(tree) == (
        "(S (NP DT NN )NP (VP VBZ (S (VP TO (VP VB )VP )VP )S )VP . )S"
    )
    assert [w for w, _ in tagged_words(tree)] == [
        "The",
        "dog",
        "barks",
        "to",
        "play",
        ".",
    ]


@pytest.mark.parametrize(
    "gold, hypothesis, expected",
    [
        # One wrong bracket of five: VP(2,3) for VP(2,6); "." is not a word.
        (
            "(TOP (S (NP (DT The) (NN dog)) (VP (VBZ barks) (PP (IN in) (NP (DT "
            "the) (NN park)))) (. .)))",
            "(S (NP XX XX )NP (VP XX )VP (PP XX (NP XX XX )NP )PP XX )S",
            {
                "gold_brackets": 5,
                "test_brackets": 5,
                "matched": 4,
                "bracket_precision": 80.0,
                "bracket_recall": 80.0,
                "bracket_f1": 80.0,
            },
        ),
        # Function tags stripped, PRT = ADVP.
        (
            "(TOP (S (NP-SBJ (PRP He)) (VP (VBD gave) (PRT (RP up)) (NP (NN "
            "smoking))) (. .)))",
            "(S (NP XX )NP (VP XX (ADVP XX )ADVP (NP XX )NP )VP XX )S",
            {"matched": 5, "bracket_f1": 100.0, "exact": 1},
        ),
        # Punctuation is deleted, so a comma inside or outside the NP is the
        # same bracket NP(1,2).
        (
            "(TOP (S (ADVP (RB Today)) (, ,) (NP (NNP John)) (VP (VBD left)) (. .)))",
            "(S (ADVP XX )ADVP (NP XX XX )NP (VP XX )VP XX )S",
            {"gold_brackets": 4, "matched": 4, "bracket_f1": 100.0},
        ),
        # Two gold NP(0,1) (a unary chain), one predicted: precision 3/3,
        # recall 3/4, F1 2 * 1 * 0.75 / 1.75.
        (
            "(TOP (S (NP (NP (NNS dogs))) (VP (VBP bark))))",
            "(S (NP XX )NP (VP XX )VP )S",
            {
                "gold_brackets": 4,
                "test_brackets": 3,
                "matched": 3,
                "bracket_precision": 100.0,
                "bracket_recall": 75.0,
                "bracket_f1": 85.71,
            },
        ),
        # A constituent over a trace only is no bracket: gold S(0,1), VP(0,1);
        # predicted S(0,1) and VP(0,1) twice.
        (
            "(TOP (S (NP-SBJ (-NONE- *)) (VP (VB Go)) (. !)))",
            "(S (VP (VP XX )VP )VP XX )S",
            {
                "gold_brackets": 2,
                "test_brackets": 3,
                "matched": 2,
                "bracket_precision": 66.67,
                "bracket_recall": 100.0,
                "bracket_f1": 80.0,
            },
        ),
    ],
)
def test_bracket_scores_match_hand_computed_evalb(gold, hypothesis, expected):
    scores = _score(gold, hypothesis)
    assert {k: scores[k] for k in expected} == expected
    assert scores["repaired_trees"] == 0


def test_a_tree_of_other_words_is_a_length_mismatch_not_a_score():
    scores = BracketScores()
    scores.add(
        Tree.fromstring("(S (NP (NN a)) (VP (VB b)))"),
        Tree.fromstring("(S (NP (NN a)) (VP (VB b) (NP (NN c))))"),
    )
    assert (scores.sentences, scores.length_mismatches, scores.gold_brackets) == (
        1,
        1,
        0,
    )


@pytest.mark.parametrize(
    "hypothesis, brackets",
    [
        # Unclosed brackets closed; the missing fourth word joins S.
        ("(S (NP XX XX )NP (VP XX", {("S", 0, 4), ("NP", 0, 2), ("VP", 2, 3)}),
        # Unmatched ")" dropped (")NP" closes S), extra leaves dropped.
        (
            ")S (S (NP XX )NP )NP (VP XX XX XX XX XX )VP )S",
            {("S", 0, 1), ("NP", 0, 1), ("VP", 1, 4)},
        ),
        # A closing label that does not match: the nesting decides.
        (
            "(S (NP XX XX )VP (VP XX XX )NP )S",
            {("S", 0, 4), ("NP", 0, 2), ("VP", 2, 4)},
        ),
        # An empty constituent is dropped.
        ("(S (NP )NP (NP XX XX XX XX )NP )S", {("S", 0, 4), ("NP", 0, 4)}),
        # No brackets at all: the words, and no bracket to score.
        ("XX XX", set()),
    ],
)
def test_ill_formed_output_is_repaired_and_counted(hypothesis, brackets):
    tagged = [("a", "DT"), ("dog", "NN"), ("saw", "VBD"), ("cats", "NNS")]
    tree, repaired = delinearize(hypothesis, tagged)
    assert repaired
    assert tree.leaves() == ["a", "dog", "saw", "cats"]
    found, words = labelled_brackets(tree)
    assert (set(found), words) == (brackets, 4)


def test_well_formed_linearisations_round_trip_unrepaired():
    rng = random.Random(7)
    gold = [Tree.fromstring(toy_tree(rng)) for _ in range(200)]
    hypotheses = [linearize(t) for t in gold]
    for tree in gold:
        parsed, repaired = delinearize(linearize(tree), tagged_words(tree))
        assert not repaired
        assert labelled_brackets(parsed) == labelled_brackets(tree)
        # What the dev evaluator rebuilds from a (words, target) pair.
        sentence = " ".join(w for w, _ in tagged_words(tree))
        rebuilt = tree_of_linearisation(sentence, linearize(tree))
        assert rebuilt.pos() == tagged_words(tree)
        assert labelled_brackets(rebuilt) == labelled_brackets(tree)
    scores = score_parses(hypotheses, gold)
    assert (scores["bracket_f1"], scores["exact_match"], scores["repaired_trees"]) == (
        100.0,
        100.0,
        0,
    )


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "(S (NP (NN a)) (VP (VB b)))\n(S (NP (NN a)\n",
            r"trees:2: not a bracketed tree",
        ),
        (
            "(S (NP (NN a)) (VP (VB b)))\n\n(S (NP (-NONE- *)))\n",
            r"trees:3: a tree without words",
        ),
        ("\n  \n", r"trees: no trees"),
    ],
)
def test_bad_treebank_lines_are_named(tmp_path, text, message):
    path = tmp_path / "trees"
    path.write_text(text)
    with pytest.raises(DataError, match=message):
        read_trees(str(path))


@pytest.mark.slow
def test_train_and_eval_take_treebanks_and_report_evalb(tmp_path):
    paths = write_treebank(
        str(tmp_path / "treebank"), (("train", 200), ("dev", 4), ("test", 8))
    )
    common = [
        f"--model_dir={tmp_path / 'run'}",
        f"--test_trees={paths['test']}",
        "--beam_size=1",
    ]
    trained = run_python(
        [
            "-m",
            "t2t_repro.cli",
            "train",
            *common,
            *TOY_PARSER,
            "--train_steps=10",
            "--cooldown_steps=0",
            "--eval_every=10",
            "--checkpoint_every=10",
            f"--train_trees={paths['train']}",
            f"--dev_trees={paths['dev']}",
        ]
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert re.search(
        r"^test: .*test.trees, 8 sentences, beam 1", trained.stdout, re.M
    ), trained.stdout
    assert re.search(r"^bracket F1 [\d.]+ \(precision", trained.stdout, re.M), (
        trained.stdout
    )
    assert re.search(
        r"^exact match [\d.]+%, \d+ of 8 outputs were "
        r"ill-formed trees and repaired$",
        trained.stdout,
        re.M,
    ), trained.stdout
    assert "dev greedy bracket F1" in trained.stderr
    evaluated = run_python(
        ["-m", "t2t_repro.cli", "eval", *common, f"--output_dir={tmp_path / 'eval'}"]
    )
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    scores = json.loads((tmp_path / "eval" / "test.trees.step10.json").read_text())
    assert scores["sentences"] == 8 and "bracket_f1" in scores
    hypotheses = (tmp_path / "eval" / "test.trees.step10.hyp").read_text()
    assert len(hypotheses.splitlines()) == 8


# A small pre-norm model learns the toy grammar fastest (post-norm with
# dropout 0.1 was at bracket F1 41.5 after 1,000 steps, pre-norm without
# dropout at 85.0 after 2,000 and 92.1 after 3,000).
TOY_PARSER = [
    "--vocab_size=200",
    "--d_model=128",
    "--num_heads=4",
    "--d_ff=256",
    "--num_layers=2",
    "--pre_norm",
    "--dropout=0.0",
    "--max_length=128",
    "--warmup_steps=200",
    "--train_steps=4000",
    "--cooldown_steps=1000",
    "--batch_tokens=2048",
    "--checkpoint_every=1000",
    "--eval_every=2000",
    "--mixed_precision=fp32",
]


@pytest.mark.slow  # about 5 minutes
def test_a_short_training_run_parses_held_out_toy_sentences(tmp_path):
    paths = write_treebank(str(tmp_path / "treebank"))
    model_dir = tmp_path / "run"
    common = [f"--model_dir={model_dir}", f"--test_trees={paths['test']}"]
    trained = run_python(
        [
            "-m",
            "t2t_repro.cli",
            "train",
            *common,
            *TOY_PARSER,
            f"--train_trees={paths['train']}",
            f"--dev_trees={paths['dev']}",
        ],
        timeout=1800,
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    f1 = float(re.search(r"bracket F1 ([\d.]+)", trained.stdout).group(1))
    assert f1 >= 90.0, trained.stdout
    evaluated = run_python(
        ["-m", "t2t_repro.cli", "eval", *common, f"--output_dir={tmp_path / 'eval'}"]
    )
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    scores = json.loads(next((tmp_path / "eval").glob("*.json")).read_text())
    assert scores["bracket_f1"] == f1
    assert scores["sentences"] == 200
