"""A small treebank generated from a toy grammar (the Penn Treebank is
licensed and not available to the tests): Penn-style trees with
punctuation, a unary chain, PRT and ADVP, recursion through SBAR.

    python tests/helpers/toy_treebank.py DIR   # DIR/{train,dev,test}.trees
"""

import os
import random
import sys

_WORDS = {
    "DT": ["the", "a", "every"],
    "NN": ["dog", "cat", "man", "woman", "ball", "park", "house", "child"],
    "JJ": ["big", "small", "red", "old"],
    "NNP": ["John", "Mary", "Berlin"],
    "VBZ": ["sees", "likes", "finds", "knows"],
    "VBD": ["slept", "laughed", "left"],
    "VBP": ["picked", "gave"],
    "RP": ["up", "back"],
    "RB": ["quickly", "often", "today"],
    "LOC": ["in", "near"],
}


def _leaf(tag, rng, word_tag=None):
    return f"({tag} {rng.choice(_WORDS[word_tag or tag])})"


def _simple_np(rng):
    kind = rng.random()
    if kind < 0.2:
        return f"(NP {_leaf('NNP', rng)})"
    if kind < 0.55:
        return f"(NP {_leaf('DT', rng)} {_leaf('NN', rng)})"
    return f"(NP {_leaf('DT', rng)} {_leaf('JJ', rng)} {_leaf('NN', rng)})"


def _np(rng):
    if rng.random() < 0.25:  # "the dog of the man": NP over NP and PP
        return f"(NP {_simple_np(rng)} (PP (IN of) {_simple_np(rng)}))"
    return _simple_np(rng)


def _vp(rng, depth):
    kind = rng.random()
    if kind < 0.2:
        return f"(VP {_leaf('VBD', rng)})"
    if kind < 0.35:
        return f"(VP {_leaf('VBD', rng)} (ADVP {_leaf('RB', rng)}))"
    if kind < 0.5:
        return f"(VP {_leaf('VBP', rng, 'VBP')} (PRT {_leaf('RP', rng)}) {_np(rng)})"
    if kind < 0.65 and depth < 2:
        return f"(VP {_leaf('VBZ', rng)} (SBAR (IN that) {_s(rng, depth + 1)}))"
    if kind < 0.8:
        return (
            f"(VP {_leaf('VBZ', rng)} {_np(rng)} "
            f"(PP {_leaf('IN', rng, 'LOC')} {_simple_np(rng)}))"
        )
    return f"(VP {_leaf('VBZ', rng)} {_np(rng)})"


def _s(rng, depth=0):
    return f"(S {_np(rng)} {_vp(rng, depth)})"


def toy_tree(rng):
    """One sentence's tree, with the TOP root tgrep writes."""
    punctuation = rng.choice(["(. .)", "(. !)", ""])
    if rng.random() < 0.15:  # a comma inside the sentence
        return (
            f"(TOP (S (ADVP {_leaf('RB', rng)}) (, ,) {_np(rng)} "
            f"{_vp(rng, 1)} {punctuation}))"
        )
    return f"(TOP (S {_np(rng)} {_vp(rng, 0)} {punctuation}))"


def write_treebank(
    directory, sizes=(("train", 3000), ("dev", 100), ("test", 200)), seed=0
):
    """Writes DIR/<split>.trees; returns {split: path}."""
    rng = random.Random(seed)
    paths = {}
    os.makedirs(directory, exist_ok=True)
    for split, count in sizes:
        paths[split] = os.path.join(directory, f"{split}.trees")
        with open(paths[split], "w", encoding="utf-8") as handle:
            handle.writelines(toy_tree(rng) + "\n" for _ in range(count))
    return paths


if __name__ == "__main__":
    print(write_treebank(sys.argv[1]))
