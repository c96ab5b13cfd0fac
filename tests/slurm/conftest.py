"""A real Slurm for the tests in this folder: munge, slurmctld and three slurmd.

``cluster.sh`` starts it in a temporary folder for each test and stops it after (each takes
well under a second): nodes node9, node10 and node11 (their names cross a digit), each
slurmd in a network namespace of its own with its own address, so each node's tasks are
reached at their own address and two tasks on different nodes may use one port, as on real
hardware. The cluster's bridge and ports are the host's, so one cluster runs at a time: a
file lock shared by the pytest-xdist workers makes the tests take turns.
``scripts/test.sh`` installs Debian's Slurm and munge. Without them or root, the tests are
skipped with the reason, except under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support import scenario_env, unavailable

CLUSTER = Path(__file__).with_name("cluster.sh")
TOOLS = ("slurmctld", "slurmd", "srun", "sbatch", "salloc", "munged", "ip", "nsenter", "unshare")


@dataclass(frozen=True)
class Slurm:
    """The running test cluster: its folder and ``slurm.conf``."""

    folder: Path

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The tests' clean environment, pointed at this cluster, plus ``extra``."""
        return scenario_env({"SLURM_CONF": str(self.folder / "slurm.conf"), **(extra or {})})

    def run(
        self, args: list[str], extra: Mapping[str, str] | None = None, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            args, env=self.env(extra), capture_output=True, text=True, timeout=timeout
        )


@pytest.fixture
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slurm]:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        unavailable(f"a real Slurm needs {', '.join(missing)} (scripts/test.sh installs them)")
    if os.geteuid() != 0:
        unavailable("a real Slurm in network namespaces needs root")
    # The workers' temporary folders share a parent: the lock there is the same for all.
    lock = tmp_path_factory.getbasetemp().parent / "tfboot-slurm.lock"
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield from _cluster(tmp_path_factory.mktemp("slurm"))


def _cluster(folder: Path) -> Iterator[Slurm]:
    up = subprocess.run(
        ["bash", str(CLUSTER), "up", str(folder)], capture_output=True, text=True, timeout=120
    )
    try:
        assert up.returncode == 0, f"the cluster did not start:\n{up.stdout}\n{up.stderr}"
        yield Slurm(folder)
    finally:
        subprocess.run(
            ["bash", str(CLUSTER), "down", str(folder)], capture_output=True, timeout=120
        )
