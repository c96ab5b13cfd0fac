"""PyTorch's DataLoader against ``/dev/shm`` in real containers: real workers (fork and
forkserver), Docker's own ``--shm-size`` tmpfs, a CPU quota and a memory limit.

Two PyTorches: 2.13.0+cpu on Python 3.11 (``loader_311``), whose image carries TensorFlow
only, so the test environment's site-packages is mounted read-only behind the image's own
(tfboot and NumPy stay the image's); and Debian's 2.14 on Python 3.14 (``loader_314``), in
its image, run with the interpreter's default start method, forkserver. Each failing case
runs first with tfboot disabled, to show the failure it turns into a message: PyTorch's own
"unable to allocate shared memory(shm)" in the worker, or a hang.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from container_runs import MOUNTED_SITE, SITE, Outcome, cpus, image_site, run_container

# The image comes from the runner's fixture, looked up by name in each test: ``image`` runs
# them after the background build, with the tests that need an image (two of them, run
# first, had waited out the build inside their own call: 800 and 787 s on a loaded machine).
pytestmark = [pytest.mark.docker, pytest.mark.image]

LOADER = Path(__file__).resolve().parent / "loader"
TOTAL = float(sum(range(36)))  # the job's answer: the items' first elements summed
UNWARNED = "tfboot: warning: DataLoader"


def _runner(image: str, path: str | None, mounts: list[tuple[Path, str]]):
    def run(args: list[str], disabled: bool = False, timeout: float = 300,
            **docker: object) -> Outcome:  # fmt: skip
        env = {"TFBOOT_DISABLE": "1" if disabled else "0", **({"PYTHONPATH": path} if path else {})}
        return run_container(image, ["python3", "/probe/loader_job.py", *args], env,
                             mounts=mounts, timeout=timeout, **docker)  # fmt: skip

    return run


@pytest.fixture(scope="module")
def loader_311(tfboot_image: str):
    path = f"{image_site(tfboot_image)}:{MOUNTED_SITE}"
    return _runner(tfboot_image, path, [(LOADER, "/probe"), (SITE, MOUNTED_SITE)])


@pytest.fixture(scope="module")
def loader_314(torch_image: str):
    return _runner(torch_image, None, [(LOADER, "/probe")])


# (the runner, the start method): "default" is the interpreter's, forkserver on 3.14.
STARTS = [
    pytest.param("loader_311", "fork", id="3.11-fork"),
    pytest.param("loader_311", "forkserver", id="3.11-forkserver"),
    pytest.param("loader_314", "default", id="3.14-forkserver"),
]


@pytest.mark.parametrize(("runner", "context"), STARTS)
def test_a_full_dev_shm_is_named_with_its_need_and_its_fix(request, runner: str,
                                                           context: str) -> None:  # fmt: skip
    """Batches of 30 MiB from 2 workers with prefetch_factor 2 in Docker's 64 MiB: the first
    batch arrives, the third cannot be allocated. Without tfboot, PyTorch's error, or, where
    the allocation that fails is the batch's small tensor of counts, moved to /dev/shm as
    the worker's queue sends it, a hang (seen in CI, 1 run in 15 with four at once here);
    with it, a warning at the first batch and an error naming the need, the size and the
    fix, every time."""
    run_loader = request.getfixturevalue(runner)
    args = ["10", "3", "2", context]
    plain = run_loader(args, disabled=True, shm_size="64m", timeout=60)
    assert plain.exit_code in (1, None), plain
    assert "unable to allocate shared memory(shm)" in plain.stderr and "tfboot" not in plain.stderr
    seen = run_loader(args, shm_size="64m")
    assert seen.exit_code == 1, seen
    assert (
        "tfboot: configured PyTorch: /dev/shm 64 MiB (Docker's default size, a tmpfs of "
        "its own), 64 MiB free: DataLoader workers pass their batches through it" in seen.stderr
    )
    # The warning comes at the first batch the main process receives; with forkserver the
    # second worker may fill /dev/shm before the first worker's batch 0 exists, and then no
    # batch arrives before the error (seen once in CI). The error is said either way.
    warned = [x for x in seen.stderr.splitlines() if x.startswith(UNWARNED)]
    assert len(warned) <= 1, seen.stderr
    for text in warned:
        assert text.startswith(
            "tfboot: warning: DataLoader: its 2 worker(s) hold up to 2 x prefetch_factor 2 "
            "batches of 30 MiB in /dev/shm, 150 MiB with the one in use, but /dev/shm 64 MiB "
            "(Docker's default size, a tmpfs of its own), "
        ) and text.endswith(
            "MiB free: docker run --shm-size=192m (Compose: shm_size: 192m); or fewer workers, a "
            "lower prefetch_factor or a smaller batch"
        ), text
    error = next(x for x in seen.stderr.splitlines() if x.startswith("RuntimeError: tfboot:"))
    assert error.startswith(("RuntimeError: tfboot: /dev/shm is full: 30 MiB more for a batch, "
                             "but /dev/shm 64 MiB (Docker's default size",
                             "RuntimeError: tfboot: /dev/shm is full: a batch of 30 MiB could "
                             "not be sent to the main process, but /dev/shm 64 MiB (Docker's "
                             "default size")), error  # fmt: skip
    assert error.endswith("a DataLoader's 2 worker(s) hold up to 2 x prefetch_factor 2 batches "
                          "there; give it at least 192 MiB: docker run --shm-size=192m "
                          "(Compose: shm_size: 192m); or use fewer workers, a lower "
                          "prefetch_factor or a smaller batch"), error  # fmt: skip
    assert "unable to allocate shared memory(shm)" in seen.stderr  # PyTorch's own, chained


@pytest.mark.parametrize(("runner", "context"), STARTS)
def test_a_batch_that_cannot_be_sent_is_an_error_not_a_hang(request, runner: str,
                                                            context: str) -> None:  # fmt: skip
    """A collate function of the program's own makes each batch a fresh tensor, which the
    worker's queue moves to /dev/shm as it sends it. When that fails, PyTorch prints the
    error in the worker and the main process waits for the batch for ever (pytorch#1355):
    shown under fork and 3.14's forkserver, for 60 s. With tfboot the error goes in the
    batch's place and the job ends by it."""
    run_loader = request.getfixturevalue(runner)
    args = ["10", "3", "2", context, "own"]
    if context != "forkserver":
        plain = run_loader(args, disabled=True, shm_size="64m", timeout=60)
        assert plain.exit_code is None, plain  # still waiting
        assert "python3 /probe/loader_job.py" in plain.processes, plain
        assert "unable to allocate shared memory(shm)" in plain.stderr, plain
    seen = run_loader(args, shm_size="64m")
    assert seen.exit_code == 1, seen
    error = next(x for x in seen.stderr.splitlines() if x.startswith("RuntimeError: tfboot:"))
    assert re.fullmatch(
        r"RuntimeError: tfboot: /dev/shm is full: a batch of 30 MiB could not be sent to the "
        r"main process, but /dev/shm 64 MiB \(Docker's default size, a tmpfs of its own\), "
        r"\d+ MiB free; a DataLoader's 2 worker\(s\) hold up to 2 x prefetch_factor 2 batches "
        r"there; give it at least 192 MiB: docker run --shm-size=192m \(Compose: shm_size: "
        r"192m\); or use fewer workers, a lower prefetch_factor or a smaller batch",
        error,
    ), error
    assert "Caught RuntimeError in DataLoader worker process" in seen.stderr, seen
    assert "unable to allocate shared memory(shm)" in seen.stderr  # PyTorch's own, chained


@pytest.mark.parametrize(("runner", "context"), STARTS[1:])
def test_a_loader_that_fits_runs_as_without_tfboot(request, runner: str, context: str) -> None:
    """Batches of 12 MiB: 60 MiB in flight fit Docker's 64 MiB. The job runs, unwarned about
    /dev/shm; 2 workers on a quota of 1 CPU are said, and each worker has one thread."""
    seen = request.getfixturevalue(runner)(["4", "3", "2", context], shm_size="64m", **cpus(1))
    assert seen.ok().json() == {"total": TOTAL, "worker_threads": [1]}, seen
    warned = [x for x in seen.stderr.splitlines() if x.startswith(UNWARNED)]
    assert len(warned) == 1 and re.fullmatch(
        r"tfboot: warning: DataLoader: num_workers=2 and the main process are 3 processes on "
        r"a CPU quota of 1 \(/sys/fs/cgroup/\S+\): they take turns on it; num_workers=1 "
        r"fits it \(kept as given\)", warned[0]), seen.stderr  # fmt: skip


def test_a_dev_shm_large_enough_says_nothing(loader_311) -> None:
    seen = loader_311(["10", "3", "2", "fork"], shm_size="256m")
    assert seen.ok().json() == {"total": TOTAL, "worker_threads": [1]}, seen
    assert "/dev/shm" not in seen.stderr and UNWARNED not in seen.stderr, seen.stderr


def test_dev_shm_counted_against_the_memory_limit_is_said(loader_311) -> None:
    """A memory-backed /dev/shm of 2 GiB under a 1 GiB memory limit (as an emptyDir with
    medium: Memory and no sizeLimit): 750 MiB of batches in flight do not fit beside the
    job; the warning comes at the first batch, before the OOM killer."""
    seen = loader_311(["50", "3", "2", "fork"], shm_size="2g", mem_limit="1g",
                      memswap_limit="1g")  # fmt: skip
    warned = [x for x in seen.stderr.splitlines() if x.startswith(UNWARNED)]
    assert len(warned) == 1, seen
    assert (
        "batches of 150 MiB in /dev/shm, 750 MiB with the one in use, and its pages count "
        "against the memory limit of 1024 MiB, of which " in warned[0]
    ), warned
    assert (
        "the OOM killer would end a worker; raise the memory limit by 768 MiB with "
        "/dev/shm's size" in warned[0]
    ), warned
    if seen.exit_code == 0:  # the main process kept up: it ran, warned
        assert json.loads(seen.stdout.strip().splitlines()[-1])["total"] == TOTAL


def test_doctor_says_a_small_dev_shm(tfboot_image: str) -> None:
    seen = run_container(
        tfboot_image,
        ["python3", "-m", "tfboot", "doctor", "--framework", "torch"],
        {"PYTHONPATH": f"{image_site(tfboot_image)}:{MOUNTED_SITE}"},
        mounts=[(SITE, MOUNTED_SITE)],
        shm_size="64m",
    ).ok()
    assert (
        "  /dev/shm 64 MiB (Docker's default size, a tmpfs of its own), 64 MiB free: smaller "
        "than a DataLoader with workers plausibly needs (256 MiB)" in seen.stdout
    ), seen
