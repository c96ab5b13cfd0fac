"""Memory kept for reuse never costs a job its life: real containers, real limits (cgroup v1).

Each shape runs with tfboot's defaults (nothing set) and with tfboot off
(``TFBOOT_DISABLE=1``), in a fresh container of the test image under ``--memory=M
--memory-swap=M``: a limit lowered and raised by ``docker update`` while the job runs (what
Kubernetes's in-place resize and VPA's in-place mode write), bursts inside one call that
holds the interpreter lock (when no Python thread, the governor's included, can run), and a
limit filled by page cache or ``/dev/shm``. Where tfboot off finishes with 5% of the limit to
spare, tfboot must finish too. This machine's cgroup v2 hierarchy has no memory controller:
v2's files are ``tests/test_governor.py``'s, on fake trees.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from container_runs import QUIET_TF, cpus, run_container

import docker

pytestmark = pytest.mark.docker

TFDATA = Path(__file__).resolve().parent.parent / "tfdata"
MIB = 1 << 20
OFF = {"TFBOOT_DISABLE": "1"}


def _last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


def _wait_for(container, word: str, seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        container.reload()
        if word in container.logs(stderr=False).decode().split():
            return
        if container.status == "exited":
            break
        time.sleep(0.2)
    pytest.fail(f"no {word!r} from the probe:\n{container.logs().decode()[-4000:]}")


def resized(image: str, env: dict[str, str]) -> tuple[int, dict]:
    """The probe's ``resize`` shape, with the limit lowered from 2 GiB to 1 GiB and raised
    back by ``docker update``; the exit status and the probe's record."""
    client = docker.from_env()
    container = client.containers.run(
        image, ["python3", "/probe/kept.py", "resize", "420"], detach=True,
        environment={**QUIET_TF, **env}, volumes={str(TFDATA): {"bind": "/probe", "mode": "ro"}},
        mem_limit="2g", memswap_limit="2g", **cpus(2),
    )  # fmt: skip
    try:
        _wait_for(container, "freed")
        container.update(mem_limit="1g", memswap_limit="1g")
        _wait_for(container, "resized")
        container.update(mem_limit="2g", memswap_limit="2g")
        code = int(container.wait(timeout=240)["StatusCode"])
        logs = container.logs(stderr=False).decode()
        return code, (_last_json(logs) if code == 0 else {"logs": container.logs().decode()})
    finally:
        container.remove(force=True)


def test_a_limit_lowered_while_memory_is_kept_costs_nothing(tfboot_image: str) -> None:
    """A 2 GiB container lowered to 1 GiB after the job freed 400 MiB, then a second process
    of 420 MiB, then the job itself allocates as much: tfboot off ends at about 90% of the
    new limit; tfboot must finish too."""
    found = {}
    for side, env in (("on", {}), ("off", OFF)):
        code, found[side] = resized(tfboot_image, env)
        assert code == 0 and found[side]["second_exit"] == 0, (side, found[side])
    on = found["on"]
    stats = on["governor"]
    assert [w["limit_mib"] for w in stats["limits_watched"]] == [2048, 1024, 2048], stats
    assert stats["limit_mib"] == 2048 and stats["trim_at_mib"] == int(2048 * 0.65)
    # glibc gave the freed arrays back itself past 4% of 2 GiB; what it still held free past
    # 4% of the new limit went back at the resize's reading: the job holds no more than
    # tfboot off does, give or take the 4% glibc may keep
    assert stats["bounding_trims"] >= 1, stats
    assert on["resident_after_free_mib"] <= found["off"]["resident_after_free_mib"] + 82, found


def test_bursts_under_the_interpreter_lock_find_little_kept(tfboot_image: str) -> None:
    """After 180 MiB of 1 MiB temporaries freed, a ``bytes * n`` in a thread and a
    ``json.loads``, each inside one call, sized to take tfboot off to 92% of a 1 GiB limit."""
    for env in (OFF, {}):
        outcome = run_container(
            tfboot_image, ["python3", "/probe/kept.py", "burst"], env,
            mounts=[(TFDATA, "/probe")], mem_limit="1g", memswap_limit="1g", timeout=600,
            **cpus(2),
        )  # fmt: skip
        assert outcome.exit_code == 0, f"killed or failed ({env or 'tfboot on'})\n{outcome}"
        found = outcome.json()
        assert found["planned_peak"] <= 0.95 and found["bytes_burst_mib"] >= 100, found
    governor = found["governor"]
    assert governor["kept_mib"] == 40, governor  # 4% of 1 GiB
    if governor["holds"]:  # the governor, running again after a burst, saw heap fill the limit
        assert governor["filled"]["by"] in ("heap", "other processes"), governor


# Each fill's MiB (TensorFlow's process holds about 200 MiB more: /dev/shm takes the working
# set past 75%) and what its container needs.
FILLS = {"cache": ("1200", {}), "shm": ("1400", {"shm_size": "2g"})}


@pytest.mark.parametrize("where", list(FILLS))
def test_page_cache_and_shm_never_put_the_job_in_a_hold(tfboot_image: str, where: str) -> None:
    """A 2 GiB container whose limit is filled by a dataset read every epoch (page cache),
    or past 75% by files in ``/dev/shm``: NumPy temporaries of 8 MiB fault as with tfboot off
    or less, and the record says what filled the limit."""
    mib, options = FILLS[where]
    runs = {}
    for side, env in (("off", OFF), ("on", {}), ("off", OFF), ("on", {})):
        found = run_container(
            tfboot_image, ["python3", "/probe/kept.py", where, mib], env,
            mounts=[(TFDATA, "/probe")], mem_limit="2g", memswap_limit="2g", timeout=600,
            **cpus(2), **options,
        ).ok().json()  # fmt: skip
        runs.setdefault(side, []).append(found)
    least_off = min(r["faults"] for r in runs["off"])
    tax = 8 * 256 * 3 * 150  # a fresh mapping for every array
    for run in runs["on"]:
        assert run["faults"] <= 1.2 * least_off + 0.02 * tax, runs
        governor = run["governor"]
        assert governor["holds"] == 0, governor  # (a trim as the fill crosses a level: cheap)
    if where == "shm":
        filled = runs["on"][0]["governor"]["filled"]
        assert runs["on"][0]["total_shmem"] >= 1400, runs["on"][0]
        assert filled["by"] == "/dev/shm" and filled["shm"].startswith("/dev/shm 2048 MiB"), filled
        assert runs["on"][0]["governor"]["holds_declined"] == 1
    else:
        assert runs["on"][0]["total_active_file"] >= 600, runs["on"][0]


SIBLING = """
import json, subprocess, sys, time
sibling = subprocess.Popen([sys.executable, "-c",
    "import sys; b = bytearray(700 << 20); print('ready', flush=True); sys.stdin.read()"],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
sibling.stdout.readline()  # a sibling of the job in the same cgroup, 700 MiB touched
job = subprocess.run([sys.executable, "-c",
    "import json, time, tensorflow\\n"
    "from tfboot.executor.governor import current\\n"
    "time.sleep(2)\\nprint(json.dumps(current().stats()))"],
    capture_output=True, text=True, check=True)
sibling.communicate(b"")
print(job.stdout.strip().splitlines()[-1])
"""


def test_a_figure_is_compared_with_the_job_not_its_neighbours(tfboot_image: str) -> None:
    """``HOST_MEMORY_LIMIT_MB=1024`` in a 4 GiB container where a sibling holds 700 MiB: the
    figure is the job's own, so the job (TensorFlow, about 500 MiB) is not held."""
    outcome = run_container(
        tfboot_image, ["python3", "-c", SIBLING], {"HOST_MEMORY_LIMIT_MB": "1024"},
        mem_limit="4g", memswap_limit="4g", timeout=300, **cpus(2),
    ).ok()  # fmt: skip
    stats = outcome.json()
    assert stats["working_set_source"].startswith("the resident sets of this process and its")
    assert stats["limit_mib"] == 1024 and stats["holds"] == 0 and stats["trims"] == 0, stats
