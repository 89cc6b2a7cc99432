"""TensorFlow Datasets translation builders (wmt14_translate/de-en, ...)."""

import socket
import urllib.parse

from t2t_repro.data import DataError
from t2t_repro.data.text_files import do_not_convert

# Where the WMT builders download from; probed so that an offline machine
# fails in seconds instead of retrying for minutes.
_PROBE_URL = "https://www.statmt.org"


def _online(url=_PROBE_URL, timeout=5.0):
    parsed = urllib.parse.urlparse(url)
    try:
        address = (parsed.hostname, parsed.port or 443)
        socket.create_connection(address, timeout=timeout).close()
        return True
    except OSError:
        return False


def tfds_pairs(
    name,
    split,
    source_lang,
    target_lang,
    data_dir=None,
    manual_dir=None,
    probe_url=_PROBE_URL,
):
    """(source, target) string pairs from a prepared or preparable builder.

    Args:
        name: builder name with config, e.g. "wmt14_translate/de-en".
        split: "train", "validation" or "test" (TFDS split syntax).
        source_lang, target_lang: feature keys, e.g. "en" and "de".
        data_dir: TFDS data directory.
        manual_dir: directory with manually downloaded archives.
        probe_url: a URL of the download host, connected to first so that
            an offline machine fails in seconds.
    """
    import tensorflow_datasets as tfds

    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except Exception as error:  # tfds raises several unrelated types
        raise DataError(f"TFDS dataset {name!r}: {error}") from None
    languages = set(builder.info.features.keys())
    for lang in (source_lang, target_lang):
        if lang not in languages:
            raise DataError(
                f"TFDS dataset {name!r} has languages {sorted(languages)}, not {lang!r}"
            )
    if not builder.is_prepared():
        if manual_dir is None and not _online(probe_url):
            raise DataError(
                f"TFDS dataset {name!r} is not prepared in "
                f"{builder.data_dir} and the download host "
                f"{urllib.parse.urlparse(probe_url).hostname} is unreachable "
                "(offline?). Prepare it on a machine with internet "
                "(tfds build) and pass --tfds_data_dir, or use aligned text "
                "files with --train_src/--train_tgt."
            )
        builder.download_and_prepare(
            download_config=tfds.download.DownloadConfig(manual_dir=manual_dir)
        )
    dataset = builder.as_dataset(split=split, shuffle_files=False)
    return dataset.map(do_not_convert(lambda ex: (ex[source_lang], ex[target_lang])))
