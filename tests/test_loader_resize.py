"""A DataLoader started after a resize is judged against ``/dev/shm`` and the memory limit as
they are then (``executor.loader``), with real PyTorch (the CPU wheel).

``/dev/shm`` is a real tmpfs in a private mount namespace (``unshare -m``, root), resized live
by ``mount -o remount,size=...`` between two loaders, as the kubelet resizes a memory-backed
``emptyDir`` (KEP-6030); the memory limit is a fake cgroup v2 tree (``TFBOOT_CGROUP_ROOT``)
whose ``memory.max`` is rewritten live, as this machine's v2 hierarchy has no memory
controller (a v1 limit rewritten by ``docker update`` is in ``tests/docker/``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import cgroup_limits, scenario_env, unavailable

PROGRAM = r"""
import os, subprocess, sys, torch
from torch.utils.data import DataLoader, Dataset
class Batches(Dataset):  # 4 MiB a batch: 2 workers x 2 prefetched + 1 in use = 20 MiB
    def __len__(self): return 8
    def __getitem__(self, index): return torch.zeros(1 << 20)
def run(label):
    print(label, file=sys.stderr, flush=True)
    try:
        for _ in DataLoader(Batches(), batch_size=None, num_workers=2):
            pass
    except RuntimeError as error:  # /dev/shm too small: after the warning, as warned
        print("failed:", str(error).partition("\n")[0][:80], file=sys.stderr, flush=True)
run("== a /dev/shm of 64 MiB")
run("== again, nothing moved")
subprocess.run(["mount", "-o", "remount,size=16m", "/dev/shm"], check=True)
run("== /dev/shm resized to 16 MiB")
limit = os.path.join(os.environ["TFBOOT_CGROUP_ROOT"], "sys/fs/cgroup/memory.max")
subprocess.run(["mount", "-o", "remount,size=64m", "/dev/shm"], check=True)
open(limit, "w").write(str(510 << 20))  # 500 MiB in use: 10 MiB left, under the 20 needed
run("== the memory limit resized to 510 MiB")
"""


def test_each_loader_is_judged_as_things_are_when_it_starts(tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        unavailable("needs root and unshare(1) for a private mount namespace")
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    root = cgroup_limits(tmp_path, cpu="400000 100000")  # 4 GiB, 500 MiB in use, 4 CPUs
    line = 'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$0" -c "$1"'
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", line, sys.executable, PROGRAM],
        env=scenario_env({"TFBOOT_CGROUP_ROOT": root}), capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    said = {}  # a label's own line starts with "== " (a traceback's "assert a == b" does not)
    for part in re.split(r"^== ", done.stderr, flags=re.MULTILINE)[1:]:
        label, _, text = part.partition("\n")
        said[label] = [line for line in text.splitlines() if line.startswith("tfboot: warning")]
    assert said["a /dev/shm of 64 MiB"] == said["again, nothing moved"] == []
    resized = said["/dev/shm resized to 16 MiB"]
    assert len(resized) == 1 and "20 MiB with the one in use, but /dev/shm 16 MiB" in resized[0]
    limited = said["the memory limit resized to 510 MiB"]
    assert len(limited) == 1, limited
    assert "count against the memory limit of 510 MiB, of which 500 MiB are in use" in limited[0]
