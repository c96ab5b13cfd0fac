"""The usage report in real TensorFlow processes: every way a process ends, the file sinks,
the snapshot thread, and the children it must not write over."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support import run_python, scenario_env

pytestmark = pytest.mark.tf

WORK = """
import tensorflow as tf
x = tf.ones((256, 256))
print(float(tf.reduce_sum(tf.matmul(x, x))), flush=True)
"""
APPLIED = {"CPU_THREADS": "2"}  # something tfboot applies on any machine


def used_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("tfboot: used:")]


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def test_a_normal_end_prints_one_line_and_writes_the_final_record(tmp_path: Path) -> None:
    usage = tmp_path / "usage.json"
    run = run_python(WORK, APPLIED | {"TFBOOT_USAGE_FILE": str(usage)})
    assert run.returncode == 0, run.stderr
    [line] = used_lines(run.stderr)
    assert "host memory peak" in line and "2 threads" in line and "next time:" in line
    found = read(usage)
    assert found["schema"] == "tfboot.usage/v1" and found["final"] and found["reason"] == "exit"
    assert found["frameworks"] == ["TensorFlow"] and found["gpus"] == []
    assert found["cpu"]["threads"] == 2 and found["cpu"]["used_cpus"] > 0
    assert found["host_memory"]["peak_mib"] > 100  # TensorFlow alone takes hundreds of MiB
    assert found["suggest"]["resources"]["limits"]["memory"].endswith("Mi")
    assert [p.name for p in tmp_path.iterdir()] == ["usage.json"]


@pytest.mark.parametrize(
    ("tail", "code", "reason"),
    [("import sys; sys.exit(3)", 3, "exit"),
     ("raise ValueError('boom')", 1, "exception ValueError")],
)  # fmt: skip
def test_sys_exit_and_an_uncaught_exception_are_reported(
    tmp_path: Path, tail: str, code: int, reason: str
) -> None:
    usage = tmp_path / "usage.json"
    run = run_python(WORK + tail, APPLIED | {"TFBOOT_USAGE_FILE": str(usage)})
    assert run.returncode == code
    assert len(used_lines(run.stderr)) == 1
    assert read(usage)["reason"] == reason and read(usage)["final"]
    if code == 1:
        assert "ValueError: boom" in run.stderr  # the program's traceback is still printed


def start(code: str, env: dict[str, str]) -> subprocess.Popen[str]:
    process = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)],
                               env=scenario_env(env), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "16777216.0"  # the work is done
    return process


WAIT = WORK + "import time\ntime.sleep(60)\n"


def test_sigterm_reports_then_ends_the_process_by_the_signal(tmp_path: Path) -> None:
    usage = tmp_path / "usage.json"
    process = start(WAIT, APPLIED | {"TFBOOT_USAGE_FILE": str(usage)})
    process.send_signal(signal.SIGTERM)
    _out, err = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGTERM
    assert len(used_lines(err)) == 1
    assert read(usage)["reason"] == "SIGTERM" and read(usage)["final"]


def test_the_program_s_own_sigterm_handler_still_decides(tmp_path: Path) -> None:
    usage = tmp_path / "usage.json"
    handler = textwrap.dedent("""
        import signal, sys
        def stop(signum, frame):
            print("checkpoint written", flush=True)
            sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
    """)  # installed after tfboot's, before the work is reported done
    code = WAIT.replace("x = tf.ones", handler + "x = tf.ones")
    process = start(code, APPLIED | {"TFBOOT_USAGE_FILE": str(usage)})
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0 and "checkpoint written" in out
    assert len(used_lines(err)) == 1 and read(usage)["reason"] == "exit"


def test_a_tfboot_handler_chains_to_one_set_before_tensorflow(tmp_path: Path) -> None:
    usage = tmp_path / "usage.json"
    code = "import signal, sys\nsignal.signal(signal.SIGTERM, lambda s, f: sys.exit(7))\n" + WAIT
    process = start(code, APPLIED | {"TFBOOT_USAGE_FILE": str(usage)})
    process.send_signal(signal.SIGTERM)
    _out, err = process.communicate(timeout=30)
    assert process.returncode == 7 and len(used_lines(err)) == 1
    assert read(usage)["reason"] == "exit" and read(usage)["final"]


def test_snapshots_refresh_the_file_and_survive_a_kill(tmp_path: Path) -> None:
    usage = tmp_path / "usage.json"
    env = APPLIED | {"TFBOOT_USAGE_FILE": str(usage), "TFBOOT_USAGE_INTERVAL": "1"}
    process = start(WAIT, env)
    deadline = time.monotonic() + 20
    while not usage.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    first = read(usage)
    time.sleep(2.5)
    second = read(usage)
    process.kill()  # SIGKILL, as the OOM killer: no handler runs
    _out, err = process.communicate(timeout=30)
    assert used_lines(err) == []
    assert first["final"] is False and first["reason"] == "snapshot"
    assert second["at"] >= first["at"] and second["cpu"]["wall_seconds"] > first["cpu"][
        "wall_seconds"]  # fmt: skip
    assert read(usage)["final"] is False  # the last snapshot is what is left


def test_off_and_quiet(tmp_path: Path) -> None:
    usage = tmp_path / "usage.json"
    run = run_python(WORK, APPLIED | {"TFBOOT_USAGE": "off", "TFBOOT_USAGE_FILE": str(usage)})
    assert run.returncode == 0 and used_lines(run.stderr) == [] and not usage.exists()
    run = run_python(WORK, APPLIED | {"TFBOOT_LOG": "quiet", "TFBOOT_USAGE_FILE": str(usage)})
    assert run.returncode == 0 and "tfboot" not in run.stderr and read(usage)["final"]


def test_nothing_configured_means_no_report(tmp_path: Path) -> None:
    run = run_python(WORK, {"CPU_THREADS": "host", "HOST_MEMORY_LIMIT_MB": "host"})
    assert run.returncode == 0 and "tfboot" not in run.stderr


def test_a_child_process_does_not_write_over_its_parent_s_file(tmp_path: Path) -> None:
    usage = tmp_path / "usage.json"
    per_pid = tmp_path / "child-{pid}.json"
    code = WORK + textwrap.dedent(f"""
        import os, subprocess, sys
        child = subprocess.run([sys.executable, "-c", {WORK!r}], env=dict(
            os.environ, TFBOOT_TEXTFILE_DIR="", TFBOOT_METRICS_JOB="child"))
        print("parent", os.getpid(), flush=True)
    """)
    run = run_python(code, APPLIED | {"TFBOOT_USAGE_FILE": str(usage)})
    assert run.returncode == 0, run.stderr
    [line] = used_lines(run.stderr)  # one line for the job: the parent's, with the child's
    assert line.startswith("tfboot: used: job of 2 processes;")
    parent = int(run.stdout.split("parent")[1].split()[0])
    found = read(usage)
    assert found["pid"] == parent and found["run"]["lead"]
    [member] = found["members"]
    assert member["pid"] != parent and member["final"] and member["frameworks"] == ["TensorFlow"]
    # The child's record lives in its parent's: it wrote no file of its own over it.
    assert [p.name for p in tmp_path.iterdir()] == ["usage.json"]
    # With {pid} in the path each process writes its own file.
    run = run_python(code, APPLIED | {"TFBOOT_USAGE_FILE": str(per_pid)})
    assert run.returncode == 0, run.stderr
    assert len(list(tmp_path.glob("child-*.json"))) == 2


def test_a_fork_child_reports_nothing(tmp_path: Path) -> None:
    code = WORK + "import os, sys\nif os.fork() == 0:\n    sys.exit(0)\nos.wait()\n"
    run = run_python(code, APPLIED)
    assert run.returncode == 0 and len(used_lines(run.stderr)) == 1


def test_an_unwritable_usage_file_warns_once_and_the_job_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "missing-dir" / "usage.json"
    run = run_python(WORK, APPLIED | {"TFBOOT_USAGE_FILE": str(path)})
    assert run.returncode == 0
    warnings = [line for line in run.stderr.splitlines() if "TFBOOT_USAGE_FILE" in line]
    assert len(warnings) == 1 and "could not be written" in warnings[0]
    assert len(used_lines(run.stderr)) == 1


@pytest.mark.parametrize(
    ("name", "value", "accepted"),
    [("TFBOOT_USAGE_INTERVAL", "0", "expected whole seconds from 1 to 86400"),
     ("TFBOOT_USAGE", "maybe", "expected true/false"),
     ("TFBOOT_PUSHGATEWAY", "pushgateway:9091", "expected an http:// or https:// URL")],
)  # fmt: skip
def test_a_bad_usage_variable_fails_the_import_naming_it(
    name: str, value: str, accepted: str
) -> None:
    run = run_python(WORK, APPLIED | {name: value})
    assert run.returncode != 0
    assert f"{name}={value!r} is invalid: {accepted}" in run.stderr
