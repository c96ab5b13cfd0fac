"""Hard-link the files that the test environments hold twice, to spare the disk.

The version matrix installs the same wheels (numpy, scipy, jaxlib, Keras, ...) into several
virtual environments; a file of the same size, mode and content in two of them becomes one
inode. pip never writes a file in place (it removes and writes anew), and Python writes its
bytecode through a rename, so a linked file is never changed under another environment.

Usage: python scripts/link_duplicates.py DIR [DIR ...]   (prints what it spared)
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
from collections import defaultdict
from pathlib import Path


def regular_files(roots: list[str]) -> dict[tuple[int, int], dict[int, str]]:
    """Files by (size, mode), each inode once: the path that stands for it."""
    found: dict[tuple[int, int], dict[int, str]] = defaultdict(dict)
    for root in roots:
        for folder, _, names in os.walk(root):
            for name in names:
                path = os.path.join(folder, name)
                info = os.lstat(path)
                if stat.S_ISREG(info.st_mode) and info.st_size:
                    found[(info.st_size, info.st_mode)].setdefault(info.st_ino, path)
    return found


def digest(path: str) -> bytes:
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "blake2b").digest()


def link_duplicates(roots: list[str]) -> tuple[int, int]:
    """Link every duplicate to the first of its kind; returns (files linked, bytes spared)."""
    linked = spared = 0
    for (size, _), inodes in regular_files(roots).items():
        if len(inodes) < 2:
            continue
        first: dict[bytes, str] = {}
        for path in inodes.values():
            kept = first.setdefault(digest(path), path)
            if kept is path:
                continue
            spare = f"{path}.tfboot-link"
            os.link(kept, spare)
            os.replace(spare, path)
            linked += 1
            spared += size
    return linked, spared


def main(argv: list[str]) -> int:
    roots = [root for root in argv if Path(root).is_dir()]
    linked, spared = link_duplicates(roots)
    print(f"link_duplicates: {linked} files linked, {spared / 1e9:.1f} GB spared")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
