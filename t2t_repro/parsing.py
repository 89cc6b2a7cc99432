"""English constituency parsing as translation (the paper's section 6.3).

Source: a sentence's words. Target: its tree linearised as in Vinyals et
al. (2015), figure 2: words replaced by their POS tags, closing brackets
labelled:

    (S (NP (DT The) (NN dog)) (VP (VBZ barks)) (. .))
    ->  (S (NP DT NN )NP (VP VBZ )VP . )S

(Vinyals et al. went on to replace every tag by one placeholder, XX; why
the tags are kept: docs/reproducing_the_paper.md.)

Predicted linearisations are turned back into trees over the source words
(ill-formed ones repaired and counted) and scored like EVALB with its
standard COLLINS.prm: labelled brackets, TOP removed, traces (-NONE-) and
punctuation (, : `` '' .) deleted, function tags stripped (NP-SBJ = NP),
ADVP = PRT. Treebank files hold one bracketed tree per line (Penn
Treebank style, read with nltk's `Tree`).
"""

import collections
import dataclasses

from nltk import Tree

from t2t_repro.data import DataError
from t2t_repro.data.text_files import numbered_lines

LEAF = "XX"  # any leaf token, when only the shape of a tree matters
# Labels of a root that only wraps the sentence: tgrep's TOP, the Penn
# Treebank's empty label "( (S ...))", and ROOT of other treebanks.
ROOT_LABELS = ("TOP", "ROOT", "")
TRACE_TAG = "-NONE-"
# COLLINS.prm: DELETE_LABEL (besides TOP) and EQ_LABEL.
DELETED_TAGS = frozenset({TRACE_TAG, ",", ":", "``", "''", "."})
EQUIVALENT_LABELS = {"PRT": "ADVP"}
EVALB_NOTE = (
    "labelled bracketing as EVALB with COLLINS.prm (TOP removed, "
    "punctuation and traces deleted, function tags stripped, "
    "ADVP = PRT), all sentence lengths"
)


def _is_preterminal(node):
    return len(node) == 1 and not isinstance(node[0], Tree)


def _base_label(label):
    """EVALB's modify_label: NP-SBJ-1 and NP=2 are NP; -NONE- stays."""
    for index, char in enumerate(label):
        if char in "-=" and index > 0:
            return label[:index]
    return label


def _without_traces(node):
    """`node` without -NONE- elements and the constituents left empty, or
    None if nothing is left."""
    if _is_preterminal(node):
        return None if node.label() == TRACE_TAG else node
    children = [c for c in (_without_traces(c) for c in node) if c is not None]
    return Tree(node.label(), children) if children else None


def _sentence_tree(tree):
    """The tree below its wrapping root(s), without traces."""
    tree = _without_traces(tree)
    while (
        tree is not None
        and tree.label() in ROOT_LABELS
        and len(tree) == 1
        and not _is_preterminal(tree)
    ):
        tree = tree[0]
    return tree


def tagged_words(tree):
    """[(word, POS tag)] of a tree, traces left out."""
    return [(word, tag) for word, tag in tree.pos() if tag != TRACE_TAG]


def linearize(tree):
    """The target string of a tree: brackets and POS tags."""
    tokens = []

    def visit(node):
        if _is_preterminal(node):
            tokens.append(node.label())
            return
        label = _base_label(node.label())
        tokens.append("(" + label)
        for child in node:
            visit(child)
        tokens.append(")" + label)

    tree = _sentence_tree(tree)
    if tree is not None:
        visit(tree)
    return " ".join(tokens)


def delinearize(text, tagged):
    """(tree over `tagged` words, repaired) from a predicted linearisation.

    The brackets nest as they open and close (a closing label is not
    checked); each leaf token (a predicted tag) takes the next word and
    its tag from `tagged`. Repairs: an unmatched ")" is dropped, unclosed
    brackets are closed, missing leaves join the outermost constituent,
    extra leaves and constituents without any leaf are dropped.
    `repaired` says whether `text` had another shape than the tree
    returned (predicted tags are not compared).
    """
    root = Tree("TOP", [])
    stack = [root]
    used = 0
    for token in text.split():
        kind = _token_kind(token)
        if kind == "open":
            node = Tree(token[1:], [])
            stack[-1].append(node)
            stack.append(node)
        elif kind == "close":
            if len(stack) > 1:
                stack.pop()
        elif used < len(tagged):
            word, tag = tagged[used]
            stack[-1].append(Tree(tag, [word]))
            used += 1
    outermost = root[0] if len(root) and not _is_preterminal(root[0]) else root
    outermost.extend(Tree(tag, [word]) for word, tag in tagged[used:])
    tree = _without_empty_constituents(root) or Tree("TOP", [])
    return tree, _shape(linearize(tree)) != _shape(text)


def _token_kind(token):
    """ "open" ("(NP"), "close" (")NP", or a bare ")") or "leaf" (a tag)."""
    if token.startswith("(") and len(token) > 1:
        return "open"
    return "close" if token.startswith(")") else "leaf"


def _shape(linearised):
    """The tokens of a linearisation with every leaf the same."""
    return [
        LEAF if _token_kind(token) == "leaf" else token for token in linearised.split()
    ]


def _without_empty_constituents(node):
    if _is_preterminal(node):
        return node
    children = [
        c for c in (_without_empty_constituents(c) for c in node) if c is not None
    ]
    return Tree(node.label(), children) if children else None


def labelled_brackets(tree):
    """EVALB's brackets of a tree: a Counter of (label, start, end) over
    word positions that skip deleted words (punctuation, traces), without
    preterminals, the root and brackets that cover no word; and the number
    of words kept."""
    brackets = collections.Counter()
    position = 0

    def visit(node, is_root):
        nonlocal position
        if _is_preterminal(node):
            if node.label() not in DELETED_TAGS:
                position += 1
            return
        start = position
        for child in node:
            visit(child, False)
        label = _base_label(node.label())
        label = EQUIVALENT_LABELS.get(label, label)
        if (
            position > start
            and label not in DELETED_TAGS
            and not (is_root and label in ROOT_LABELS)
        ):
            brackets[(label, start, position)] += 1

    visit(tree, True)
    return brackets, position


@dataclasses.dataclass
class BracketScores:
    """Corpus totals, as EVALB's summary counts them."""

    sentences: int = 0
    length_mismatches: int = 0  # EVALB's error sentences: not scored
    gold_brackets: int = 0
    test_brackets: int = 0
    matched: int = 0
    exact: int = 0

    def add(self, gold_tree, test_tree):
        gold, gold_words = labelled_brackets(gold_tree)
        test, test_words = labelled_brackets(test_tree)
        self.sentences += 1
        if gold_words != test_words:
            self.length_mismatches += 1
            return
        matched = sum((gold & test).values())
        self.gold_brackets += sum(gold.values())
        self.test_brackets += sum(test.values())
        self.matched += matched
        self.exact += gold == test

    def as_dict(self):
        precision = self.matched / max(self.test_brackets, 1)
        recall = self.matched / max(self.gold_brackets, 1)
        f1 = 2 * precision * recall / max(precision + recall, 1e-12)
        return {
            **dataclasses.asdict(self),
            "bracket_precision": round(100 * precision, 2),
            "bracket_recall": round(100 * recall, 2),
            "bracket_f1": round(100 * f1, 2),
            "exact_match": round(100 * self.exact / max(self.sentences, 1), 2),
        }


def score_parses(hypotheses, gold_trees):
    """A JSON-ready dict of EVALB scores of predicted linearisations,
    turned into trees over each gold tree's words and tags, with the
    number of repaired outputs. The gold tags decide which words are
    punctuation, in both trees: EVALB scores no preterminal, and a
    mistagged comma would otherwise make a length mismatch."""
    scores, repaired = BracketScores(), 0
    for hypothesis, gold in zip(hypotheses, gold_trees, strict=True):
        tree, was_repaired = delinearize(hypothesis, tagged_words(gold))
        repaired += was_repaired
        scores.add(gold, tree)
    return {**scores.as_dict(), "repaired_trees": repaired, "note": EVALB_NOTE}


def tree_of_linearisation(sentence, linearised):
    """The tree a gold linearisation (POS tags as leaves) describes over
    the sentence's words: what a dev pair (words, target) holds."""
    tags = [t for t in linearised.split() if _token_kind(t) == "leaf"]
    return delinearize(linearised, list(zip(sentence.split(), tags)))[0]


def format_parse_scores(scores):
    return (
        f"bracket F1 {scores['bracket_f1']:.2f} (precision "
        f"{scores['bracket_precision']:.2f}, recall "
        f"{scores['bracket_recall']:.2f}; {scores['note']})\n"
        f"exact match {scores['exact_match']:.2f}%, "
        f"{scores['repaired_trees']} of {scores['sentences']} outputs "
        "were ill-formed trees and repaired"
    )


def read_trees(path):
    """Every tree of a treebank file, one per line (blank lines skipped)."""
    trees = []
    for number, line in numbered_lines(path):
        if not line.strip():
            continue
        try:
            tree = Tree.fromstring(line)
        except ValueError as error:
            raise DataError(
                f"{path}:{number}: not a bracketed tree ({str(error).splitlines()[0]})"
            ) from None
        if not tagged_words(tree):
            raise DataError(f"{path}:{number}: a tree without words")
        trees.append(tree)
    if not trees:
        raise DataError(f"{path}: no trees")
    return trees


def parsing_pairs(trees):
    """(source sentences, target linearisations) of trees."""
    sources = [" ".join(w for w, _ in tagged_words(t)) for t in trees]
    return sources, [linearize(t) for t in trees]
