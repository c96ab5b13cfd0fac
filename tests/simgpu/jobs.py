"""Several jobs at once on one simulated GPU, each needing a known amount of device memory.

Each job imports TensorFlow, places float32 tensors of ``step_mb`` MiB on GPU:0 until it
holds ``need_mb`` (or the allocator refuses: out of memory), then waits at a barrier
until every job has got that far, so that all of them hold their memory at the same
moment. The runner reads the device's shared accounting there, releases the jobs, and
each does a little work (small matrix products) and exits. Used by the multi-process
tests and by ``bench/shared_gpu.py``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from simgpu.scenarios import SimGpu, SimJob, SimRun
from simgpu.segment import DeviceAccount, Holder

# argv: need_mb step_mb barrier_dir. Prints one JSON line.
JOB = """
import json, os, pathlib, sys, time
import tensorflow as tf
need_mb, step_mb = int(sys.argv[1]), int(sys.argv[2])
barrier = pathlib.Path(sys.argv[3])
held, oom = [], False
with tf.device("/GPU:0"):
    try:
        while step_mb * len(held) < need_mb:
            held.append(tf.zeros([step_mb << 18]))
    except tf.errors.ResourceExhaustedError:
        oom = True
(barrier / str(os.getpid())).touch()
deadline = time.monotonic() + 600
while not barrier.with_suffix(".go").exists() and time.monotonic() < deadline:
    time.sleep(0.05)
if not oom:
    x = tf.random.uniform([512, 512])
    for _ in range(20):
        x = tf.linalg.normalize(x @ x)[0]
held_mb = step_mb * len(held)
print(json.dumps({"pid": os.getpid(), "tf": tf.__version__, "oom": oom, "held_mb": held_mb}))
"""


@dataclass
class Together:
    """Jobs run at once: their runs, the device while all held memory, and at the end."""

    runs: list[SimRun]
    at_barrier: DeviceAccount
    final: DeviceAccount
    wall_s: float

    @property
    def finished(self) -> int:
        return sum(1 for run in self.runs if run.ok and not run.output["oom"])

    @property
    def oom(self) -> int:
        return sum(1 for run in self.runs if run.ok and run.output["oom"])

    def holder(self, run: SimRun) -> Holder:
        """What ``run``'s process held (and its peak) while every job held its memory."""
        pid = run.output["pid"]
        return next((h for h in self.at_barrier.holders if h.pid == pid), Holder(pid, 0, 0))


def _wait_for_barrier(barrier: Path, jobs: list[SimJob], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reached = sum(1 for _ in barrier.iterdir())
        running = sum(1 for job in jobs if job.popen.poll() is None)
        if reached == len(jobs) or running == 0:
            return
        time.sleep(0.05)


def run_together(
    gpu: SimGpu,
    jobs: int,
    env: Mapping[str, str] | None,
    *,
    need_mb: int,
    step_mb: int,
    memory_mb: int,
    timeout: float = 300,
) -> Together:
    """Start ``jobs`` jobs on ``gpu``'s device 0 at once, under ``env``; wait for them all."""
    barrier = gpu.workdir / f"barrier-{uuid.uuid4().hex[:8]}"
    barrier.mkdir()
    args = (str(need_mb), str(step_mb), str(barrier))
    start = time.perf_counter()
    started = [gpu.start(JOB, env, args=args, memory_mb=str(memory_mb)) for _ in range(jobs)]
    _wait_for_barrier(barrier, started, timeout)
    at_barrier = gpu.account()
    barrier.with_suffix(".go").touch()
    runs = [job.wait(timeout) for job in started]
    return Together(runs, at_barrier, gpu.account(), time.perf_counter() - start)
