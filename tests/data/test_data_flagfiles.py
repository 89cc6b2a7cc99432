"""The data flagfiles in flags/data/ name files `t2t-fetch multi30k`
fetches, each split's source and target in the flagfile's languages."""

import glob
import os

import pytest

from helpers.processes import REPO
from t2t_repro.data.fetch import multi30k_files

_FETCHED = {file.name for file in multi30k_files()}
_SPLITS = {"train": "train", "dev": "val", "test": "test_2016_flickr"}


def _flags(path):
    values = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("--"):
                name, _, value = line.strip()[2:].partition("=")
                values[name] = value
    return values


@pytest.mark.parametrize(
    "path", sorted(glob.glob(os.path.join(REPO, "flags/data/multi30k_*.cfg")))
)
def test_a_data_flagfile_names_the_fetched_files_of_its_languages(path):
    source, target = os.path.basename(path)[len("multi30k_") : -len(".cfg")].split("_")
    values = _flags(path)
    assert (values["source_lang"], values["target_lang"]) == (source, target)
    for role, split in _SPLITS.items():
        for side, lang in (("src", source), ("tgt", target)):
            assert values[f"{role}_{side}"] == f"data/multi30k/{split}.{lang}.gz"
            assert f"{split}.{lang}.gz" in _FETCHED


def test_docs_training_lists_every_data_flagfile():
    with open(os.path.join(REPO, "docs/training.md"), encoding="utf-8") as handle:
        page = handle.read()
    for path in glob.glob(os.path.join(REPO, "flags/data/*.cfg")):
        name = os.path.relpath(path, REPO)
        assert f"| `{name}` |" in page, name
