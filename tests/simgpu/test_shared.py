"""Several processes on one simulated GPU: shared accounting, caps that fit, crash cleanup.

The simulated device's used bytes live in shared memory (see ``sim.c``), so processes
of one ``SimGpu`` meet on one device as they would on a CUDA GPU: what one holds,
another cannot get, and the free memory the device reports (from which TensorFlow sizes
its pool) counts every process. Each test's GPU has its own namespace.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from simgpu.jobs import run_together
from simgpu.scenarios import MIB, SimGpu, SimJob

pytestmark = [pytest.mark.simgpu, pytest.mark.tf]

DEVICE_MB = 4096
NEED_MB = 1536  # two jobs need 3072 MiB: they fit on the device together

# Take the default pool (one small tensor), say so in the file argv[1], then hold it.
HOLD = """
import pathlib, sys, time
import tensorflow as tf
with tf.device("/GPU:0"):
    x = tf.zeros([1 << 18])
pathlib.Path(sys.argv[1]).touch()
time.sleep(600)
"""

PLACE_SMALL = """
import tensorflow as tf
with tf.device("/GPU:0"):
    x = tf.zeros([1 << 18])
assert x.device.endswith("GPU:0"), x.device
"""


def test_without_a_cap_the_second_job_cannot_get_its_memory(stable_gpu: SimGpu) -> None:
    together = run_together(stable_gpu, 2, {}, need_mb=NEED_MB, step_mb=256, memory_mb=DEVICE_MB)
    for run in together.runs:
        run.check()
    assert (together.finished, together.oom) == (1, 1)
    winner, loser = sorted(together.runs, key=lambda run: run.output["oom"])
    assert winner.output["held_mb"] == NEED_MB
    assert loser.output["held_mb"] < NEED_MB
    # The first job's preallocated pool left the second only the rest of the device.
    account = together.at_barrier
    assert account.total == DEVICE_MB * MIB
    assert together.holder(winner).bytes > (DEVICE_MB - NEED_MB) * MIB
    assert together.holder(winner).bytes + together.holder(loser).bytes == account.used
    assert account.used <= account.total
    assert together.final.used == 0 and together.final.holders == ()


@pytest.mark.nightly
def test_caps_that_fit_let_every_job_finish(nightly_gpu: SimGpu) -> None:
    cap_mb = 1800
    together = run_together(
        nightly_gpu,
        2,
        {"MEMORY_LIMIT_MB": str(cap_mb)},
        need_mb=NEED_MB,
        step_mb=256,
        memory_mb=DEVICE_MB,
    )
    for run in together.runs:
        run.check()
    assert (together.finished, together.oom) == (2, 0)
    for run in together.runs:
        assert together.holder(run).bytes == cap_mb * MIB
    assert together.at_barrier.used == together.final.peak == 2 * cap_mb * MIB
    assert together.final.used == 0


def wait_for(path: Path, job: SimJob, timeout: float = 180) -> None:
    """Wait until ``job`` has created ``path``; fail if it exits or times out first."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if job.popen.poll() is not None:
            run = job.wait()
            pytest.fail(f"holder exited {run.proc.returncode}:\n{run.stderr}")
        assert time.monotonic() < deadline, f"no {path.name} after {timeout} s"
        time.sleep(0.1)


def test_a_killed_holders_memory_returns_to_the_device(stable_gpu: SimGpu, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    holder = stable_gpu.start(HOLD, args=(str(ready),), memory_mb=str(DEVICE_MB))
    try:
        wait_for(ready, holder)
        held = stable_gpu.account().used
        assert held > (DEVICE_MB // 2) * MIB
        assert [h.pid for h in stable_gpu.account().holders] == [holder.popen.pid]

        # While it holds its pool, a second process sees only what is left.
        squeezed = stable_gpu.run(PLACE_SMALL, memory_mb=str(DEVICE_MB)).check()
        assert squeezed.device(0)["first_allocation_bytes"] <= DEVICE_MB * MIB - held
    finally:
        holder.popen.kill()
    holder.popen.wait()

    # Killed: nobody has looked yet, so its entry is still there.
    assert stable_gpu.account().used == held
    # The next process drops it and gets the whole pool again.
    fresh = stable_gpu.run(PLACE_SMALL, memory_mb=str(DEVICE_MB)).check()
    assert fresh.device(0)["first_allocation_bytes"] == held
    account = stable_gpu.account()
    assert (account.reclaimed_holders, account.reclaimed_bytes) == (1, held)
    assert account.used == 0 and account.holders == ()
