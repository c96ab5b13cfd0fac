"""``scripts/link_duplicates.py``: the test environments' shared files, once on disk.

Real files in real folders: a file of the same content and mode in two trees becomes one
inode, with each path reading as before; a file that differs in content or mode stays its
own; a second pass finds nothing more.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from link_duplicates import link_duplicates  # noqa: E402


def test_only_files_of_the_same_content_and_mode_become_one(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    for tree in (one, two):
        (tree / "pkg").mkdir(parents=True)
        (tree / "pkg" / "same.py").write_bytes(b"x = 1\n" * 1000)
        (tree / "pkg" / "tool").write_bytes(b"#!/bin/sh\n")
    (one / "pkg" / "own.py").write_bytes(b"a" * 100)
    (two / "pkg" / "own.py").write_bytes(b"b" * 100)  # same size, other content
    (two / "pkg" / "tool").chmod(0o755)  # same content, other mode
    (two / "empty").write_bytes(b"")
    (one / "empty").write_bytes(b"")

    linked, spared = link_duplicates([str(one), str(two)])

    assert (linked, spared) == (1, 6000)
    assert os.path.samefile(one / "pkg" / "same.py", two / "pkg" / "same.py")
    assert (two / "pkg" / "same.py").read_bytes() == b"x = 1\n" * 1000
    assert not os.path.samefile(one / "pkg" / "own.py", two / "pkg" / "own.py")
    assert not os.path.samefile(one / "pkg" / "tool", two / "pkg" / "tool")
    assert (two / "pkg" / "tool").stat().st_mode & 0o777 == 0o755
    assert not list(tmp_path.rglob("*.tfboot-link"))
    assert link_duplicates([str(one), str(two)]) == (0, 0)
