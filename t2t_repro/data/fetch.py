"""Fetching public data sets, each file verified against a pinned SHA-256.

Multi30k (task 1) comes from the GitHub repository multi30k/dataset at a
pinned commit: the raw files (`train.en.gz`, ...) and, on request, the
official lowercased tokenized references (`tok/val.lc.norm.tok.en`, ...),
kept under their upstream names.

Each file is written to a unique temporary sibling and renamed to its
final name only once its hash matches, so a kill, a dropped connection or
a corrupt download never leaves anything under the final name. A file
already there with the right hash is kept, so a rerun fetches only what is
missing or wrong. A local copy of the files (e.g. one shipped beside the
checkout) stands in for the network for the files it holds.
"""

import contextlib
import dataclasses
import hashlib
import http.client
import os
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request

from t2t_repro.data import DataError
from t2t_repro.writer_lock import hold_writer_lock, writer_is_gone

MULTI30K_COMMIT = "a3d2e0d26b56f3846f66a952536ffed4e401d05a"
MULTI30K_BASE_URL = (
    "https://raw.githubusercontent.com/multi30k/dataset/"
    f"{MULTI30K_COMMIT}/data/task1/raw"
)
# Upstream keeps the tokenized references in tok/, beside raw/.
_TOKENIZED_FOLDER = "tok"

# SHA-256 of each raw file at MULTI30K_COMMIT, by its name in raw/.
MULTI30K_RAW_SHA256 = {
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    "test_2017_flickr.en.gz": "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
    "test_2017_flickr.de.gz": "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
    "test_2017_flickr.fr.gz": "3ba671ceb2299f3304ffafefea7a833d08632fbaf0ba18546f8a2ec2391af496",
    "test_2017_mscoco.en.gz": "aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58",
    "test_2017_mscoco.de.gz": "799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338",
    "test_2017_mscoco.fr.gz": "754f3072ba9f124569ba5258b32730fc1d214bbf8e0c6dfb2b74401676220db0",
    "test_2018_flickr.en.gz": "ef4f4844037d4c5dea75c9a8ed5fd78905967a26f67c255e230cc9780032654d",
    "test_2018_flickr.de.gz": "ddd0130c7d97482dc5197a02141dae8dd79f20f03586c480d675c09a32daf608",
    "test_2018_flickr.fr.gz": "fb2b83fcceb937a4f7e3e93c1c51c22aba92f1e342391e6b5ba392b16a920501",
}
# SHA-256 of each tokenized reference at MULTI30K_COMMIT, by its name in
# tok/ (only val and test_2016_flickr are pinned).
MULTI30K_TOKENIZED_SHA256 = {
    "val.lc.norm.tok.en": "46573ce391ae227f1c72f873392436a20ef18e0a6d518098cfbd70b77c8572ec",
    "val.lc.norm.tok.de": "97232bd273eceb7207f689527386a97e4be2616b18ada47576bdaf96c8ae1f00",
    "val.lc.norm.tok.fr": "b303e301aa21fe7822a846b2b3fb2d5a1121ec807cd5b1d006fb7b2b5507168a",
    "test_2016_flickr.lc.norm.tok.en": "5b7f32627cf99eced828311b955dae9800bb52bc8b91cf8b6526829e605b29d2",
    "test_2016_flickr.lc.norm.tok.de": "c6a33d39d48f9f510de147651316cd9d918e09ad0219df734a2f16b6baccacc4",
    "test_2016_flickr.lc.norm.tok.fr": "1463bd5960f9bfe098ec3cd752d3df0c49c84dc646fb518964a29232658cd836",
}


def _raw_name(split, lang):
    return f"{split}.{lang}.gz"


def _tokenized_name(split, lang):
    return f"{split}.lc.norm.tok.{lang}"


MULTI30K_SPLITS = tuple(
    dict.fromkeys(name.split(".")[0] for name in MULTI30K_RAW_SHA256)
)
MULTI30K_LANGS = tuple(
    dict.fromkeys(name.split(".")[1] for name in MULTI30K_RAW_SHA256)
)
# The usual benchmark; the later test sets are fetched on request.
MULTI30K_DEFAULT_SPLITS = ("train", "val", "test_2016_flickr")

# Offline must fail within seconds, so the socket gives up after this long
# without progress (connecting, or between two reads); a transfer that
# stalls that long is resumed by running the fetch again.
_SOCKET_TIMEOUT_SECONDS = 5
_CHUNK_BYTES = 1 << 16


@dataclasses.dataclass(frozen=True)
class PinnedFile:
    """A file of a data set: where it goes, where it comes from, its hash."""

    name: str  # relative to the data directory and to a local copy
    url: str
    sha256: str


def multi30k_files(
    splits=MULTI30K_DEFAULT_SPLITS,
    langs=MULTI30K_LANGS,
    base_url=MULTI30K_BASE_URL,
    tokenized_references=False,
):
    """The `PinnedFile`s of those splits and languages; with
    `tokenized_references`, also the tokenized references of the splits
    that have pinned ones. An unknown split or language is a DataError.

    >>> for file in multi30k_files(["val"], ["de"], "https://mirror/raw",
    ...                            tokenized_references=True):
    ...     print(file.name, file.url)
    val.de.gz https://mirror/raw/val.de.gz
    tok/val.lc.norm.tok.de https://mirror/tok/val.lc.norm.tok.de
    """
    splits, langs = (
        _known("split", splits, MULTI30K_SPLITS),
        _known("language", langs, MULTI30K_LANGS),
    )
    try:
        scheme = urllib.parse.urlsplit(base_url).scheme
    except ValueError:  # e.g. an unclosed [IPv6 address
        scheme = ""
    if not scheme:  # a path, or a typo
        raise DataError(
            f"{base_url}: not a URL (http://, https:// or file://); for files "
            "on this machine, --local_copy=DIR takes them from there"
        )
    # urljoin replaces the last path segment, so the folder needs its "/".
    raw_folder = base_url.rstrip("/") + "/"
    files = [
        PinnedFile(
            name, urllib.parse.urljoin(raw_folder, name), MULTI30K_RAW_SHA256[name]
        )
        for name in (_raw_name(split, lang) for split in splits for lang in langs)
    ]
    if tokenized_references:
        tokenized_folder = urllib.parse.urljoin(raw_folder, f"../{_TOKENIZED_FOLDER}/")
        files += [
            PinnedFile(
                f"{_TOKENIZED_FOLDER}/{name}",
                urllib.parse.urljoin(tokenized_folder, name),
                MULTI30K_TOKENIZED_SHA256[name],
            )
            for name in (
                _tokenized_name(split, lang) for split in splits for lang in langs
            )
            if name in MULTI30K_TOKENIZED_SHA256
        ]
    return files


def _known(kind, requested, known):
    """`requested` without repeats, each checked against `known`."""
    requested = tuple(dict.fromkeys(requested))
    if not requested:
        raise DataError(f"no {kind} asked for (known: {', '.join(known)})")
    for value in requested:
        if value not in known:
            raise DataError(f"unknown {kind} {value!r} (known: {', '.join(known)})")
    return requested


def fetch_multi30k(
    data_dir,
    splits=MULTI30K_DEFAULT_SPLITS,
    langs=MULTI30K_LANGS,
    local_copy=None,
    base_url=MULTI30K_BASE_URL,
    tokenized_references=False,
    log=print,
):
    """Puts Multi30k's files under `data_dir` (see `multi30k_files`) and
    returns their paths. `log` gets one line per file and a summary."""
    return fetch_files(
        multi30k_files(splits, langs, base_url, tokenized_references),
        data_dir,
        local_copy,
        log,
    )


def fetch_files(files, data_dir, local_copy=None, log=print):
    """Each `PinnedFile` verified under `data_dir`: kept if already there,
    else copied from `local_copy` when it holds it, else downloaded.
    Returns their paths; raises DataError at the first that fails."""
    if local_copy is not None and not os.path.isdir(local_copy):
        log(f"local copy {local_copy}: not there; downloading instead")
        local_copy = None
    outcomes = {"fetched": 0, "copied": 0, "already there": 0}
    paths = []
    for file in files:
        path = os.path.join(data_dir, file.name)
        outcomes[_fetch_file(file, path, local_copy, log)] += 1
        paths.append(path)
    log(
        f"done, {data_dir}: "
        + ", ".join(f"{count} {outcome}" for outcome, count in outcomes.items())
        + "; every SHA-256 verified"
    )
    return paths


def _fetch_file(file, path, local_copy, log):
    """Makes `path` hold `file`; returns what it took: "already there",
    "copied" or "fetched"."""
    if os.path.exists(path):
        actual = _sha256_of(path)
        if actual == file.sha256:
            log(f"{path}: already there")
            return "already there"
        log(f"{path}: SHA-256 {actual}, expected {file.sha256}; replacing it")
    source = os.path.join(local_copy, file.name) if local_copy else None
    if source and os.path.isfile(source):
        _write_verified(path, _read_chunks(source), file.sha256, source)
        log(f"{path}: copied from {source}")
        return "copied"
    _write_verified(path, _download_chunks(file.url), file.sha256, file.url)
    missing = f" ({source} not there)" if source else ""
    log(f"{path}: fetched from {file.url}{missing}")
    return "fetched"


def _sha256_of(path):
    digest = hashlib.sha256()
    for chunk in _read_chunks(path):
        digest.update(chunk)
    return digest.hexdigest()


def _read_chunks(path):
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK_BYTES):
            yield chunk


def _download_chunks(url):
    """Yields the bytes at `url`; any network failure, or a transfer shorter
    than its Content-Length, is a one-line DataError naming the URL."""
    try:
        with urllib.request.urlopen(url, timeout=_SOCKET_TIMEOUT_SECONDS) as response:
            expected_bytes = response.headers.get("Content-Length")
            received_bytes = 0
            while chunk := response.read(_CHUNK_BYTES):
                received_bytes += len(chunk)
                yield chunk
    except urllib.error.HTTPError as error:
        raise DataError(f"{url}: HTTP error {error.code} {error.reason}") from None
    except (OSError, http.client.HTTPException) as error:  # URLError too
        reason = getattr(error, "reason", error)  # URLError's socket error
        reason = (
            getattr(reason, "strerror", None) or str(reason) or type(reason).__name__
        )
        raise DataError(
            f"cannot download {url} ({reason}); without "
            "internet, --local_copy=DIR takes the files from a "
            "local copy"
        ) from None
    # http.client does not check the length when reading in chunks.
    if expected_bytes is not None and received_bytes != int(expected_bytes):
        raise DataError(
            f"{url}: connection closed after {received_bytes} of {expected_bytes} bytes"
        )


# A partial file this old, whose writer's lock can be taken, was left by a
# writer that was killed (a new writer takes its lock right after creating
# the file).
_DEAD_PARTIAL_SECONDS = 10


def _remove_dead_partials(folder, name):
    """Removes the temporary files of `_write_verified` for `name` in
    `folder` whose writer died (a kill)."""
    prefix = f".{name}.partial-"
    for entry in os.listdir(folder):
        path = os.path.join(folder, entry)
        with contextlib.suppress(FileNotFoundError):  # gone meanwhile
            if (
                entry.startswith(prefix)
                and time.time() - os.stat(path).st_mtime >= _DEAD_PARTIAL_SECONDS
                and writer_is_gone(path)
            ):
                os.remove(path)


@contextlib.contextmanager
def _naming_write_errors(path):
    """A write's OSError (a full disk, an I/O error), which names no file,
    as a one-line DataError naming `path`."""
    try:
        yield
    except OSError as error:
        raise DataError(
            f"{path}: cannot be written ({error.strerror or error})"
        ) from None


def _write_verified(path, chunks, expected_sha256, origin):
    """Writes `chunks` to `path` if their SHA-256 is `expected_sha256`, via
    a unique temporary sibling, locked while written, that never outlives
    a failure (one a kill left is removed by the next write of `path`)."""
    folder, name = os.path.split(path)
    os.makedirs(folder or ".", exist_ok=True)
    _remove_dead_partials(folder or ".", name)
    temporary = os.path.join(
        folder, f".{name}.partial-{os.getpid()}-{secrets.token_hex(4)}"
    )
    digest = hashlib.sha256()
    try:
        # O_EXCL: a concurrent fetch of the same file writes its own copy.
        with open(
            os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "wb"
        ) as handle:
            hold_writer_lock(handle)
            for chunk in chunks:
                digest.update(chunk)
                with _naming_write_errors(path):
                    handle.write(chunk)
            with _naming_write_errors(path):
                handle.flush()
                # On disk before the rename, so a crash cannot leave the
                # final name pointing at missing data.
                os.fsync(handle.fileno())
            if digest.hexdigest() != expected_sha256:
                raise DataError(
                    f"{origin}: SHA-256 {digest.hexdigest()}, "
                    f"expected {expected_sha256}; not written to "
                    f"{path}"
                )
            # Renamed while still locked: no other fetch takes it for a
            # dead writer's.
            os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


# The data sets t2t-fetch knows, by name.
FETCHERS = {"multi30k": fetch_multi30k}
