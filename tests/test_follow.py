"""PyTorch's intra-op threads follow the CPU quota while the job runs (``executor.follow``).

Real PyTorch (the CPU wheel) in a fresh process. Its quota is the kernel's own where the
machine has a cgroup v1 cpu hierarchy (root): a cpu cgroup made for the job, whose
``cpu.cfs_quota_us`` the test rewrites live, as a resize does; and a fake cgroup v2 tree
(``TFBOOT_CGROUP_ROOT``) whose ``cpu.max`` it rewrites, as this machine's cgroup v2
hierarchy has no cpu controller. A container's quota rewritten live by ``docker update
--cpus`` is ``tests/docker/test_container_follow.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import scenario_env, unavailable

TREES = Path(__file__).parent / "testdata" / "cgroup"

PROGRAM = """
import json, sys, time
import torch
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), 0.1)
x = torch.randn(256, 64)
def train():
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
def infer():
    with torch.no_grad():
        model(x)
work = {"train": train, "infer": infer}[sys.argv[1]]
if sys.argv[2:] == ["own"]:
    torch.set_num_threads(1)  # the program's own count
def say(**more):
    print(json.dumps({"threads": torch.get_num_threads(), **more}), flush=True)
say()
for line in sys.stdin:  # "SECONDS": work that long, then say the count
    end = time.monotonic() + float(line)
    while time.monotonic() < end:
        work()
    say()
from tfboot.executor.follow import current
found = current()
say(stats=None if found is None else found.stats())
"""


class Job:
    """The program above, its quota in a fake tree the test rewrites."""

    def __init__(self, tmp_path: Path, mode: str, env: dict[str, str], *args: str) -> None:
        self.root = tmp_path / "root"
        shutil.copytree(TREES / "v2-quota", self.root)  # 1.5 CPUs: 2 threads
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PROGRAM, mode, *args], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=scenario_env({"TFBOOT_CGROUP_ROOT": str(self.root), **env}),
        )  # fmt: skip
        self.first = self.said()

    def said(self) -> dict:
        line = self.proc.stdout.readline()
        assert line, self.proc.stderr.read()[-3000:]
        return json.loads(line)

    def quota(self, cpus: float) -> None:
        (self.root / "sys/fs/cgroup/cpu.max").write_text(f"{int(cpus * 100000)} 100000\n")

    def work(self, seconds: float) -> dict:
        self.proc.stdin.write(f"{seconds}\n")
        self.proc.stdin.flush()
        return self.said()

    def end(self) -> dict:
        self.proc.stdin.close()
        last = self.said()
        self.proc.wait(timeout=60)
        return last


V1_CPU = Path("/sys/fs/cgroup/cpu")


class V1Job(Job):
    """The program in a real cgroup v1 cpu group of its own, made for it, whose
    ``cpu.cfs_quota_us`` the test rewrites live, as ``docker update --cpus`` and the kubelet
    do: the kernel's own files, no Docker."""

    def __init__(self, tmp_path: Path, mode: str) -> None:
        if os.geteuid() != 0 or not (V1_CPU / "cpu.cfs_quota_us").is_file():
            unavailable("needs root and a cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu")
            pytest.skip("needs root and a cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu")
        self.group = V1_CPU / f"tfboot-follow-{os.getpid()}-{tmp_path.name}"
        self.group.mkdir()
        self.quota(1.5)
        procs = str(self.group / "cgroup.procs")

        def enter() -> None:  # in the child, before Python starts: the job's own cgroup
            with open(procs, "w") as joined:
                joined.write(str(os.getpid()))

        self.proc = subprocess.Popen(
            [sys.executable, "-c", PROGRAM, mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=scenario_env(), preexec_fn=enter,
        )  # fmt: skip
        self.first = self.said()

    def quota(self, cpus: float) -> None:
        (self.group / "cpu.cfs_quota_us").write_text(f"{int(cpus * 100000)}\n")

    def close(self) -> None:
        """The job ended, its cgroup removed (a cgroup with a process in it cannot be)."""
        self.proc.kill()
        self.proc.wait(timeout=60)
        self.group.rmdir()


def test_intra_op_threads_follow_a_real_v1_quota_rewritten_live(tmp_path: Path) -> None:
    job = V1Job(tmp_path, "train")
    try:
        assert job.first["threads"] == 2
        job.quota(1)
        assert job.work(4)["threads"] == 1
        job.quota(2)
        assert job.work(4)["threads"] == 2
        stats = job.end()["stats"]
    finally:
        job.close()
    assert [(s["quota"], s["threads"]) for s in stats["followed"]] == [(1.5, 2), (1, 1), (2, 2)]


@pytest.mark.parametrize("mode", ["train", "infer"])
def test_intra_op_threads_follow_the_quota_down_and_up(tmp_path: Path, mode: str) -> None:
    job = Job(tmp_path, mode, {})
    assert job.first["threads"] == 2
    job.quota(1)  # a resize down: taken up in the next 4 s of work, at a step or no_grad block
    assert job.work(4)["threads"] == 1
    job.quota(2)  # and up
    assert job.work(4)["threads"] == 2
    stats = job.end()["stats"]
    assert [(s["quota"], s["threads"]) for s in stats["followed"]] == [(1.5, 2), (1, 1), (2, 2)]
    assert stats["stopped"] is None


def test_a_count_the_program_set_itself_stays(tmp_path: Path) -> None:
    job = Job(tmp_path, "train", {}, "own")
    assert job.first["threads"] == 1
    job.quota(1)  # a count to apply: the thread's own is not tfboot's, so it is the program's
    assert job.work(4)["threads"] == 1
    job.quota(2)
    assert job.work(4)["threads"] == 1
    stats = job.end()["stats"]
    assert stats["stopped"] == "the program set 1 intra-op thread(s) itself: its count stays"


@pytest.mark.parametrize("env", [{"CPU_THREADS": "2"}, {"OMP_NUM_THREADS": "2"},
                                 {"CPU_THREADS": "host"}])  # fmt: skip
def test_a_count_the_user_gave_is_never_followed(tmp_path: Path, env: dict[str, str]) -> None:
    job = Job(tmp_path, "train", env)
    job.quota(1)
    assert job.work(3)["threads"] == 2
    assert job.end()["stats"] is None  # nothing follows


RESIZED = """
import os, sys
import {module}
path = os.path.join(os.environ["TFBOOT_CGROUP_ROOT"], "sys/fs/cgroup/cpu.max")
with open(path, "w") as quota:
    quota.write("100000 100000\\n")  # a resize to 1 CPU while the job runs
"""


@pytest.mark.parametrize(("module", "kept"), [
    ("tensorflow", "TensorFlow's thread pools kept 2 thread(s)"),
    ("torch", "PyTorch's intra-op pool (no optimizer step or no_grad block since) and "
              "PyTorch's inter-op pool kept 2 thread(s)"),
])  # fmt: skip
def test_the_line_says_what_kept_the_old_count(tmp_path: Path, module: str, kept: str) -> None:
    root = tmp_path / "root"
    shutil.copytree(TREES / "v2-quota", root)
    record = tmp_path / "usage.json"
    result = subprocess.run(
        [sys.executable, "-c", RESIZED.format(module=module)], capture_output=True, text=True,
        env=scenario_env({"TFBOOT_CGROUP_ROOT": str(root), "TFBOOT_USAGE_FILE": str(record)}),
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    used = next(x for x in result.stderr.splitlines() if "tfboot: used:" in x)
    assert "the CPU quota moved from 1.5 to 1 at " in used and kept in used, used
    assert "sized for the quota at the import; a restart applies the new one" in used
    cpu = json.loads(record.read_text())["cpu"]
    assert cpu["earlier_quotas"][0]["quota"] == 1.5 and cpu["quota"] == 1
    assert kept in cpu["threads_kept"]


LOADER = """
import os, torch
from torch.utils.data import DataLoader
path = os.path.join(os.environ["TFBOOT_CGROUP_ROOT"], "sys/fs/cgroup/cpu.max")
data = list(range(8))
for _ in DataLoader(data, num_workers=2, multiprocessing_context="fork"):
    pass
with open(path, "w") as quota:
    quota.write("100000 100000\\n")  # a resize to 1 CPU between two epochs
for _ in DataLoader(data, num_workers=1, multiprocessing_context="fork"):
    pass
"""


def test_a_loader_is_judged_against_the_quota_as_it_starts(tmp_path: Path) -> None:
    """num_workers=2 fits nothing under 1.5 CPUs at the import; after a resize to 1 CPU, the
    next epoch's single worker and the main process are two processes on one CPU."""
    root = tmp_path / "root"
    shutil.copytree(TREES / "v2-quota", root)
    result = subprocess.run(
        [sys.executable, "-c", LOADER], capture_output=True, text=True, timeout=300,
        env=scenario_env({"TFBOOT_CGROUP_ROOT": str(root)}),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    said = [x for x in result.stderr.splitlines() if "take turns on it" in x]
    assert len(said) == 2, result.stderr[-3000:]
    assert "num_workers=2 and the main process are 3 processes on a CPU quota of 1.5" in said[0]
    assert "num_workers=1 and the main process are 2 processes on a CPU quota of 1 " in said[1]
