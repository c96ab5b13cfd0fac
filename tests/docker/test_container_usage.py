"""The usage report in real containers: ``--memory`` and ``--cpus`` as the budgets, a
termination log mounted where the kubelet mounts it, ``docker stop`` (SIGTERM to PID 1)
and the kernel's OOM killer, after which only the periodic snapshot is left."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from container_runs import QUIET_TF, cpus
from testcontainers.core.container import DockerContainer

pytestmark = pytest.mark.docker

WORK = """
import tensorflow as tf
x = tf.ones((512, 512))
for _ in range(20):
    y = tf.matmul(x, x)
print("ready", float(tf.reduce_sum(y)), flush=True)
"""
WAIT = WORK + "import time\ntime.sleep(120)\n"
# Grows by 64 MiB (touched) every 0.3 s until the kernel kills the container.
GROW = (
    WORK
    + """
import time
held = []
while True:
    held.append(bytearray(64 << 20))
    time.sleep(0.3)
"""
)


def shared(tmp_path: Path) -> tuple[Path, Path]:
    """A directory for the usage file and an empty termination log, writable by the image's
    user (uid 1000)."""
    directory = tmp_path / "usage"
    directory.mkdir()
    directory.chmod(0o777)
    log = tmp_path / "termination-log"
    log.write_text("")
    log.chmod(0o666)
    return directory, log


def container(image: str, code: str, directory: Path, log: Path, **kwargs: object):
    found = DockerContainer(image).with_command(["python3", "-c", code])
    env = QUIET_TF | {"TFBOOT_USAGE_FILE": "/usage/usage.json", "TFBOOT_USAGE_INTERVAL": "1"}
    for key, value in env.items():
        found.with_env(key, value)
    found.with_volume_mapping(str(directory), "/usage", "rw")
    found.with_volume_mapping(str(log), "/dev/termination-log", "rw")
    return found.with_kwargs(**kwargs)


def logs(running: DockerContainer) -> tuple[str, str]:
    out, err = running.get_logs()
    return out.decode(), err.decode()


def wait_for_ready(running: DockerContainer, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while "ready" not in logs(running)[0]:
        assert time.monotonic() < deadline, logs(running)
        time.sleep(0.5)


def test_limits_usage_and_the_termination_log(tfboot_image: str, tmp_path: Path) -> None:
    directory, log = shared(tmp_path)
    with container(tfboot_image, WORK, directory, log, mem_limit="1g", memswap_limit="1g",
                   **cpus(1.5)) as running:  # fmt: skip
        status = running.get_wrapped_container().wait(timeout=300)
        _out, err = logs(running)
    assert status["StatusCode"] == 0, err
    found = json.loads((directory / "usage.json").read_text())
    memory, cpu = found["host_memory"], found["cpu"]
    assert memory["limit_mib"] == 1024 and 100 < memory["peak_mib"] < 1024, memory
    assert memory["source"].endswith(("memory.peak", "memory.max_usage_in_bytes")), memory
    assert memory["oom_kills"] == 0
    assert cpu["quota"] == 1.5 and cpu["threads"] == 2 and 0 < cpu["used_cpus"] <= 1.6, cpu
    # the cgroup's counter since configuration, plus the process tree's CPU time before it
    counter = cpu["source"].split(" since ")[0]
    assert cpu["throttled_fraction"] is not None, cpu
    assert counter.endswith(("cpu.stat usage_usec", "cpuacct.usage")), cpu
    assert found["final"] and found["reason"] == "exit"
    message = log.read_text()
    assert message.startswith("tfboot used: ") and len(message.encode()) <= 4096
    assert "of 1024 MiB" in message and "a 1.5-CPU quota" in message
    [line] = [x for x in err.splitlines() if x.startswith("tfboot: used:")]
    assert line[len("tfboot: ") :] == message.strip()[len("tfboot ") :]


def test_docker_stop_of_python_as_pid_1_is_what_it_would_be_without_tfboot(
    tfboot_image: str, tmp_path: Path
) -> None:
    """``docker stop`` sends SIGTERM to PID 1, here Python itself, as Kubernetes does. PID 1
    without a handler of its own ignores it, with tfboot as without: the engine kills it
    after the grace period, and the snapshot taken at the SIGTERM says so (the report is not
    marked finished while the job goes on)."""
    directory, log = shared(tmp_path)
    with container(tfboot_image, WAIT, directory, log, mem_limit="1g") as running:
        wait_for_ready(running)
        wrapped = running.get_wrapped_container()
        wrapped.stop(timeout=5)
        wrapped.reload()
        code = wrapped.attrs["State"]["ExitCode"]
        _out, err = logs(running)
    assert code == 137, err  # SIGKILL after the grace period: the SIGTERM was ignored
    found = json.loads((directory / "usage.json").read_text())
    assert found["final"] is False, found
    assert [s.split(" at ")[0] for s in found["signals"]] == [
        "SIGTERM (ignored: PID 1 without a handler)"
    ]
    assert "tfboot used: " in log.read_text()
    assert not [x for x in err.splitlines() if x.startswith("tfboot: used:")]


def test_an_oom_killed_job_leaves_its_last_snapshot(tfboot_image: str, tmp_path: Path) -> None:
    directory, log = shared(tmp_path)
    with container(tfboot_image, GROW, directory, log, mem_limit="768m",
                   memswap_limit="768m") as running:  # fmt: skip
        wrapped = running.get_wrapped_container()
        status = wrapped.wait(timeout=300)
        wrapped.reload()
        oom_killed = wrapped.attrs["State"]["OOMKilled"]
        _out, err = logs(running)
    assert status["StatusCode"] == 137 and oom_killed, err
    assert not [x for x in err.splitlines() if x.startswith("tfboot: used:")]  # no handler ran
    found = json.loads((directory / "usage.json").read_text())
    assert found["final"] is False and found["reason"] == "snapshot"
    assert found["host_memory"]["limit_mib"] == 768 and found["host_memory"]["peak_mib"] > 300
    assert "tfboot used: " in log.read_text()  # the snapshot's summary, for kubectl describe
