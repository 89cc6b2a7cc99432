"""t2t-fetch: Multi30k's files verified against their pinned SHA-256,
written atomically, skipped when already there, copied from a local copy
when it holds them.

A local HTTP server on 127.0.0.1 stands in for GitHub: it serves a copy of
the Multi30k files the tests read (helpers/multi30k_data.py; raw/ and tok/,
as upstream) and records each request, so a test can tell a download from
a skip or a copy."""

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import http.server
import os
import re
import shutil
import socket
import threading
import time

import pytest

from helpers.multi30k_data import MIRROR_README, MULTI30K
from helpers.processes import run_python
from t2t_repro.data import DataError, fetch

DEFAULT_FILES = [
    f"{split}.{lang}.gz"
    for split in ("train", "val", "test_2016_flickr")
    for lang in ("en", "de", "fr")
]


def _mirror_readme_sha256():
    """The SHA-256 table of the offline mirror's README, by file name (raw
    files by bare name, tokenized references as tok/NAME)."""
    with open(MIRROR_README, encoding="utf-8") as readme:
        rows = re.findall(
            r"^\| (?:multi30k/)?(\S+) \|(?:.*\|)? ([0-9a-f]{64}) \|$",
            readme.read(),
            flags=re.MULTILINE,
        )
    return {name: sha256 for name, sha256 in rows if not name.startswith("wmt14/")}


@dataclasses.dataclass
class Server:
    base_url: str  # the raw/ folder, as --base_url takes it
    root: str  # the directory it serves
    requests: list  # the path of every GET, in order


@contextlib.contextmanager
def serving(root, cut_half_way=False):
    """An HTTP server on 127.0.0.1 serving `root`. With `cut_half_way`, each
    response announces the file's full Content-Length, sends half of it
    and closes the connection."""
    requests = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=root, **kwargs)

        def do_GET(self):
            requests.append(self.path)
            if not cut_half_way:
                return super().do_GET()
            with open(self.translate_path(self.path), "rb") as served:
                body = served.read()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.close_connection = True

        def log_message(self, *args):  # keeps pytest's output clean
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    # A short poll interval: shutting down waits for the next poll.
    thread = threading.Thread(
        target=server.serve_forever, daemon=True, kwargs={"poll_interval": 0.05}
    )
    thread.start()
    try:
        yield Server(f"http://127.0.0.1:{server.server_port}/raw", root, requests)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def web_root(tmp_path):
    """A writable copy of the Multi30k files the tests read, laid out as
    upstream's data/task1/: raw/NAME.gz and tok/NAME."""
    root = tmp_path / "web"
    for folder, source in (("raw", MULTI30K), ("tok", os.path.join(MULTI30K, "tok"))):
        os.makedirs(root / folder)
        for name in os.listdir(source):
            if os.path.isfile(os.path.join(source, name)):
                shutil.copyfile(os.path.join(source, name), root / folder / name)
    return str(root)


@pytest.fixture
def server(web_root):
    with serving(web_root) as running:
        yield running


@pytest.fixture
def data_dir(tmp_path):
    return str(tmp_path / "data" / "multi30k")


def fetch_logged(data_dir, **options):
    """fetch_multi30k's paths and the lines it logged."""
    lines = []
    paths = fetch.fetch_multi30k(data_dir, log=lines.append, **options)
    return paths, lines


def same_bytes(path_a, path_b):
    with open(path_a, "rb") as a, open(path_b, "rb") as b:
        return a.read() == b.read()


def sha256_of(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def entries(directory):
    """Every name in `directory` (hidden temporary files too)."""
    return sorted(os.listdir(directory)) if os.path.isdir(directory) else []


def run_fetch(*arguments):
    """t2t-fetch in a fresh process: (exit status, stdout, stderr, seconds
    taken)."""
    start = time.monotonic()
    result = run_python(["-m", "t2t_repro.cli", "fetch", *arguments], timeout=60)
    return (result.returncode, result.stdout, result.stderr, time.monotonic() - start)


@pytest.mark.skipif(
    not os.path.exists(MIRROR_README),
    reason="no independent record of the checksums here: it is the offline "
    "mirror's README (../shared/data/README.md beside the checkout)",
)
def test_pinned_hashes_are_those_of_the_mirror_readme():
    pinned = {
        **fetch.MULTI30K_RAW_SHA256,
        **{
            f"tok/{name}": sha256
            for name, sha256 in fetch.MULTI30K_TOKENIZED_SHA256.items()
        },
    }
    recorded = _mirror_readme_sha256()
    assert len(recorded) == 24
    assert pinned == recorded


def test_default_base_url_is_upstream_raw_folder_at_the_pinned_commit():
    assert fetch.MULTI30K_BASE_URL == (
        "https://raw.githubusercontent.com/multi30k/dataset/"
        "a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/raw"
    )


def test_fresh_fetch_downloads_every_default_file_verified(server, data_dir):
    paths, lines = fetch_logged(data_dir, base_url=server.base_url)

    assert paths == [os.path.join(data_dir, name) for name in DEFAULT_FILES]
    assert server.requests == [f"/raw/{name}" for name in DEFAULT_FILES]
    for name in DEFAULT_FILES:
        assert same_bytes(os.path.join(data_dir, name), os.path.join(MULTI30K, name)), (
            name
        )
    assert entries(data_dir) == sorted(DEFAULT_FILES)  # nothing else left
    assert [line.split(": ")[1] for line in lines[:-1]] == [
        f"fetched from {server.base_url}/{name}" for name in DEFAULT_FILES
    ]
    assert lines[-1] == (
        f"done, {data_dir}: 9 fetched, 0 copied, 0 already "
        "there; every SHA-256 verified"
    )


def test_rerun_skips_every_file_without_a_request(server, data_dir):
    fetch_logged(data_dir, base_url=server.base_url)
    server.requests.clear()

    _, lines = fetch_logged(data_dir, base_url=server.base_url)

    assert server.requests == []
    assert lines[:-1] == [
        f"{os.path.join(data_dir, name)}: already there" for name in DEFAULT_FILES
    ]
    assert "0 fetched, 0 copied, 9 already there" in lines[-1]


def test_file_with_a_wrong_hash_is_fetched_again(server, data_dir):
    fetch_logged(data_dir, base_url=server.base_url)
    damaged = os.path.join(data_dir, "val.de.gz")
    with open(damaged, "ab") as handle:
        handle.write(b"junk")
    damaged_sha256 = sha256_of(damaged)
    server.requests.clear()

    _, lines = fetch_logged(data_dir, base_url=server.base_url)

    assert server.requests == ["/raw/val.de.gz"]
    replaced = lines.index(
        f"{damaged}: SHA-256 {damaged_sha256}, expected "
        f"{fetch.MULTI30K_RAW_SHA256['val.de.gz']}; replacing it"
    )
    assert lines[replaced + 1] == (
        f"{damaged}: fetched from {server.base_url}/val.de.gz"
    )
    assert same_bytes(damaged, os.path.join(MULTI30K, "val.de.gz"))


def test_corrupt_download_is_one_line_and_leaves_nothing(server, data_dir):
    corrupted = os.path.join(server.root, "raw", "val.en.gz")
    with open(corrupted, "r+b") as handle:
        handle.seek(100)
        handle.write(b"X")
    expected = sha256_of(os.path.join(MULTI30K, "val.en.gz"))

    status, _, stderr, _ = run_fetch(
        "multi30k", f"--data_dir={data_dir}", f"--base_url={server.base_url}"
    )

    assert status == 2, stderr
    assert stderr == (
        f"t2t-fetch: error: {server.base_url}/val.en.gz: SHA-256 "
        f"{sha256_of(corrupted)}, expected {expected}; not written to "
        f"{os.path.join(data_dir, 'val.en.gz')}\n"
    )
    # The files before it are kept; nothing of it, not even a temporary.
    assert entries(data_dir) == sorted(["train.en.gz", "train.de.gz", "train.fr.gz"])


def test_interrupted_transfer_leaves_nothing_and_a_rerun_completes(web_root, data_dir):
    with serving(web_root, cut_half_way=True) as cutting:
        with pytest.raises(DataError) as error:
            fetch_logged(data_dir, base_url=cutting.base_url)
    size = os.path.getsize(os.path.join(MULTI30K, "train.en.gz"))
    assert str(error.value) == (
        f"{cutting.base_url}/train.en.gz: connection closed after "
        f"{size // 2} of {size} bytes"
    )
    assert entries(data_dir) == []

    with serving(web_root) as good:
        paths, _ = fetch_logged(data_dir, base_url=good.base_url)
    assert [sha256_of(path) for path in paths] == [
        fetch.MULTI30K_RAW_SHA256[name] for name in DEFAULT_FILES
    ]
    assert entries(data_dir) == sorted(DEFAULT_FILES)


def test_a_killed_writers_partial_file_is_removed_by_the_next_fetch(server, data_dir):
    """A fetch killed mid-file leaves its hidden partial file; the next
    fetch of that file removes it, but not one whose writer still holds
    its lock (another fetch writing the file now)."""
    os.makedirs(data_dir)
    dead, live = (
        os.path.join(data_dir, f".val.en.gz.partial-{pid}-0a1b2c3d")
        for pid in (99999, os.getpid())
    )
    for path in (dead, live):
        with open(path, "wb") as handle:
            handle.write(b"half")
        old = time.time() - 60
        os.utime(path, (old, old))
    with open(live, "rb") as writer:
        fcntl.flock(writer, fcntl.LOCK_EX)
        fetch_logged(data_dir, base_url=server.base_url)
    assert entries(data_dir) == sorted(DEFAULT_FILES + [os.path.basename(live)])


def test_a_full_disk_is_one_line_naming_the_file(server, data_dir, monkeypatch):
    def full(descriptor):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(fetch.os, "fsync", full)
    with pytest.raises(DataError) as error:
        fetch_logged(data_dir, base_url=server.base_url)
    assert str(error.value) == (
        f"{os.path.join(data_dir, 'train.en.gz')}: cannot be written "
        "(No space left on device)"
    )
    assert entries(data_dir) == []


def test_local_copy_is_copied_without_a_request(server, data_dir):
    paths, lines = fetch_logged(data_dir, base_url=server.base_url, local_copy=MULTI30K)

    assert server.requests == []
    assert lines[:-1] == [
        f"{os.path.join(data_dir, name)}: copied from {os.path.join(MULTI30K, name)}"
        for name in DEFAULT_FILES
    ]
    for path, name in zip(paths, DEFAULT_FILES):
        assert same_bytes(path, os.path.join(MULTI30K, name))


def test_absent_local_copy_is_said_and_the_files_downloaded(server, data_dir, tmp_path):
    absent = str(tmp_path / "no_such_copy")

    _, lines = fetch_logged(data_dir, base_url=server.base_url, local_copy=absent)

    assert lines[0] == f"local copy {absent}: not there; downloading instead"
    assert server.requests == [f"/raw/{name}" for name in DEFAULT_FILES]
    assert entries(data_dir) == sorted(DEFAULT_FILES)


def test_local_copy_lacking_a_file_downloads_only_that_one(server, data_dir, tmp_path):
    partial_copy = tmp_path / "partial_copy"
    partial_copy.mkdir()
    for name in DEFAULT_FILES[1:]:
        shutil.copyfile(os.path.join(MULTI30K, name), partial_copy / name)

    _, lines = fetch_logged(
        data_dir, base_url=server.base_url, local_copy=str(partial_copy)
    )

    assert server.requests == [f"/raw/{DEFAULT_FILES[0]}"]
    assert lines[0] == (
        f"{os.path.join(data_dir, DEFAULT_FILES[0])}: fetched from "
        f"{server.base_url}/{DEFAULT_FILES[0]} "
        f"({partial_copy / DEFAULT_FILES[0]} not there)"
    )
    assert "1 fetched, 8 copied, 0 already there" in lines[-1]


def test_damaged_local_copy_is_refused_naming_it(server, data_dir, tmp_path):
    damaged_copy = tmp_path / "damaged_copy"
    damaged_copy.mkdir()
    (damaged_copy / "val.fr.gz").write_bytes(b"not gzip")

    with pytest.raises(DataError) as error:
        fetch_logged(
            data_dir,
            base_url=server.base_url,
            splits=["val"],
            langs=["fr"],
            local_copy=str(damaged_copy),
        )

    assert str(error.value).startswith(
        f"{damaged_copy / 'val.fr.gz'}: SHA-256 "
        f"{hashlib.sha256(b'not gzip').hexdigest()}, expected "
        f"{fetch.MULTI30K_RAW_SHA256['val.fr.gz']}; not written to "
    )
    assert entries(data_dir) == []


def test_missing_file_on_the_server_is_its_http_error(server, data_dir):
    os.remove(os.path.join(server.root, "raw", "val.fr.gz"))

    with pytest.raises(DataError) as error:
        fetch_logged(data_dir, base_url=server.base_url, splits=["val"], langs=["fr"])

    assert str(error.value) == (
        f"{server.base_url}/val.fr.gz: HTTP error 404 File not found"
    )
    assert entries(data_dir) == []


def test_offline_is_one_line_naming_the_url_and_local_copy(data_dir):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed_url = f"http://127.0.0.1:{probe.getsockname()[1]}/raw"

    status, _, stderr, seconds = run_fetch(
        "multi30k", f"--data_dir={data_dir}", f"--base_url={closed_url}"
    )

    assert status == 2, stderr
    assert len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith(
        f"t2t-fetch: error: cannot download {closed_url}/train.en.gz "
    )
    assert "--local_copy=DIR" in stderr
    assert seconds < 10
    assert entries(data_dir) == []


def test_server_that_never_answers_times_out_within_seconds(data_dir):
    with socket.socket() as silent:  # accepts connections, never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        silent_url = f"http://127.0.0.1:{silent.getsockname()[1]}/raw"
        start = time.monotonic()
        with pytest.raises(DataError) as error:
            fetch_logged(data_dir, base_url=silent_url)
        seconds = time.monotonic() - start

    assert str(error.value).startswith(
        f"cannot download {silent_url}/train.en.gz (timed out)"
    )
    assert seconds < 10
    assert entries(data_dir) == []


def test_later_test_set_not_matching_its_pinned_hash_is_refused(server, data_dir):
    served = os.path.join(server.root, "raw", "test_2017_flickr.en.gz")
    shutil.copyfile(os.path.join(MULTI30K, "test_2016_flickr.en.gz"), served)

    with pytest.raises(DataError) as error:
        fetch_logged(
            data_dir,
            base_url=server.base_url,
            splits=["test_2017_flickr"],
            langs=["en"],
        )

    assert server.requests == ["/raw/test_2017_flickr.en.gz"]
    assert (
        f"SHA-256 {sha256_of(served)}, expected "
        f"{fetch.MULTI30K_RAW_SHA256['test_2017_flickr.en.gz']}; not written"
    ) in str(error.value)
    assert entries(data_dir) == []


def test_tokenized_references_come_from_the_sibling_tok_folder(server, data_dir):
    paths, _ = fetch_logged(
        data_dir,
        base_url=server.base_url,
        splits=["train", "val"],
        langs=["de"],
        tokenized_references=True,
    )

    assert server.requests == [
        "/raw/train.de.gz",
        "/raw/val.de.gz",
        "/tok/val.lc.norm.tok.de",
    ]
    assert paths[-1] == os.path.join(data_dir, "tok", "val.lc.norm.tok.de")
    assert same_bytes(paths[-1], os.path.join(MULTI30K, "tok", "val.lc.norm.tok.de"))


@pytest.mark.parametrize(
    "request_, message",
    [
        (
            {"splits": ["val", "test_2019"]},
            "unknown split 'test_2019' (known: "
            "train, val, test_2016_flickr, test_2017_flickr, test_2017_mscoco, "
            "test_2018_flickr)",
        ),
        ({"langs": ["en", "cs"]}, "unknown language 'cs' (known: en, de, fr)"),
        (
            {"splits": []},
            "no split asked for (known: train, val, "
            "test_2016_flickr, test_2017_flickr, test_2017_mscoco, "
            "test_2018_flickr)",
        ),
    ],
)
def test_unknown_split_or_language_is_a_data_error(request_, message):
    with pytest.raises(DataError) as error:
        fetch.multi30k_files(**request_)
    assert str(error.value) == message


def test_unknown_data_set_is_one_line_listing_the_known(data_dir):
    status, _, stderr, _ = run_fetch("wmt14", f"--data_dir={data_dir}")

    assert status == 2
    assert stderr == ("t2t-fetch: error: unknown data set 'wmt14' (known: multi30k)\n")
    assert entries(data_dir) == []
