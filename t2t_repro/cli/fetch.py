"""t2t-fetch: download a public data set, every file checked against the
SHA-256 pinned in this package.

    t2t-fetch multi30k [--data_dir=data/multi30k] [--local_copy=DIR]
        [--splits=train,val,test_2016_flickr] [--langs=en,de,fr]
        [--tokenized_references]

multi30k: Multi30k task 1 (image captions, English/German/French, 29,000
training sentences per language) from the GitHub repository
multi30k/dataset at a pinned commit, under its upstream names
(train.en.gz, val.de.gz, test_2016_flickr.fr.gz, ...). Non-commercial
research and educational use; cite Elliott et al. 2016 (en, de) and 2017
(fr, the 2017 test sets).

A file already there with the right hash is kept, so a rerun fetches only
what is missing or damaged; a download that fails or does not match its
hash writes nothing under the file's name (a damaged file already there
stays until a good copy replaces it).
"""

import os

from absl import app, flags

from t2t_repro.cli import common
from t2t_repro.data import fetch

flags.DEFINE_string(
    "data_dir",
    None,
    "Directory the files go to (created "
    "if needed). Default: data/<data set>, e.g. "
    "data/multi30k, under the current directory.",
)
flags.DEFINE_list(
    "splits",
    list(fetch.MULTI30K_DEFAULT_SPLITS),
    f"Comma-separated splits to fetch, of: {', '.join(fetch.MULTI30K_SPLITS)}.",
)
flags.DEFINE_list(
    "langs",
    list(fetch.MULTI30K_LANGS),
    f"Comma-separated languages to fetch, of: {', '.join(fetch.MULTI30K_LANGS)}.",
)
flags.DEFINE_string(
    "local_copy",
    None,
    "Directory holding (some of) the "
    "files under the same names, e.g. a copy shipped beside "
    "the checkout: the files it holds are copied from it "
    "(hash checked) instead of downloaded. If it or a file "
    "is missing, that file is downloaded.",
)
flags.DEFINE_string(
    "base_url",
    fetch.MULTI30K_BASE_URL,
    "URL of the folder "
    "holding the raw files, each found by its name; the "
    "tokenized references are read from its sibling folder "
    "tok/. Change it to use a mirror.",
)
flags.DEFINE_bool(
    "tokenized_references",
    False,
    "Also fetch the official "
    "lowercased, tokenized references of val and "
    "test_2016_flickr (what the multimodal-MT literature "
    "scores against) into <data_dir>/tok/.",
)

FLAGS = flags.FLAGS


def main(data_sets):
    known = f"(known: {', '.join(fetch.FETCHERS)})"
    if len(data_sets) != 1:
        raise app.UsageError(
            f"name one data set to fetch {known}, not {len(data_sets)}"
        )
    name = data_sets[0]
    if name not in fetch.FETCHERS:
        raise app.UsageError(f"unknown data set {name!r} {known}")
    fetch.FETCHERS[name](
        FLAGS.data_dir or os.path.join("data", name),
        splits=FLAGS.splits,
        langs=FLAGS.langs,
        local_copy=FLAGS.local_copy,
        base_url=FLAGS.base_url,
        tokenized_references=FLAGS.tokenized_references,
    )


def run():
    # Fetching needs no TensorFlow, and an offline machine is told so
    # within seconds.
    common.run(main, positional_arguments=True, tensorflow=False)


if __name__ == "__main__":  # python -m t2t_repro.cli.fetch
    run()
