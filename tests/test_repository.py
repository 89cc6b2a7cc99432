"""What a fresh clone must give a user: scripts that run as typed."""

import os
import stat

import pytest

from processes import REPO

SCRIPTS = sorted(os.listdir(os.path.join(REPO, "scripts")))


@pytest.mark.parametrize("name", [n for n in SCRIPTS
                                  if n.endswith((".sh", ".py"))])
def test_every_script_runs_as_typed(name):
    """The docs say `scripts/reference_multi30k.sh`, not `bash ...`: each
    script needs its executable bit (from git) and an interpreter line."""
    path = os.path.join(REPO, "scripts", name)
    assert os.stat(path).st_mode & stat.S_IXUSR, f"{name}: not executable"
    with open(path, encoding="utf-8") as handle:
        assert handle.readline().startswith("#!/usr/bin/env "), name
