"""Issue 36's usage defects, each in real processes where it was seen (PyTorch's CPU build):
a relative usage file resolved once, two jobs' metrics kept apart on one node and one
gateway, an exited child's record merged and removed at the lead's next snapshot, a short
child's memory counted with its parent's, and the signal wakeup fd left to Trio."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from support import scenario_env, unavailable
from test_usage_guest import serve
from tfboot.usage import metrics
from tfboot.usage.measure import together_mib

APPLIED = {"CPU_THREADS": "2"}  # something tfboot applies on any machine
MIB = 1 << 20


def run(code: str, env: dict[str, str], cwd: Path | None = None,
        ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """``code`` in a fresh interpreter with tfboot applying ``APPLIED``."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd,
                          env=scenario_env(APPLIED | env), capture_output=True, text=True,
                          timeout=180)  # fmt: skip


# -- 1. a relative TFBOOT_USAGE_FILE ------------------------------------------------------------


@pytest.mark.slow
def test_a_relative_usage_file_stays_where_the_job_started(tmp_path: Path) -> None:
    """A job that changes directory after the import (Hydra does) keeps its snapshots and
    its final record in one file, against the directory it started in."""
    start, later = tmp_path / "start", tmp_path / "outputs"
    start.mkdir()
    later.mkdir()
    code = f"""
        import os, time, torch
        time.sleep(1.6)  # a snapshot, written from the directory of the start
        os.chdir({str(later)!r})
        time.sleep(1.6)
    """
    done = run(code, {"TFBOOT_USAGE_FILE": "usage.json", "TFBOOT_USAGE_INTERVAL": "1"}, start)
    assert done.returncode == 0, done.stderr
    assert not (later / "usage.json").exists()
    assert json.loads((start / "usage.json").read_text())["final"] is True


# -- 2. two jobs on one node --------------------------------------------------------------------


def slurm_record(job: str, step: str = "0", final: bool = True) -> dict[str, Any]:
    """Rank 0 of a Slurm job's step on node ``n1``, as its lead records it."""
    return {"labels": {"job": "tfboot", "pod": "n1", "node": "n1", "slurm_job_id": job,
                       "task": "0"},
            "run": {"id": f"slurm-{job}.{step}", "lead": True, "parent": None},
            "final": final, "host_memory": {"peak_mib": 100.0},
            "cpu": {"cpu_seconds": 1.0}}  # fmt: skip


def test_two_slurm_jobs_on_one_node_write_two_textfiles(tmp_path: Path) -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    first, second = slurm_record("101"), slurm_record("102")
    assert metrics.textfile_name(first) != metrics.textfile_name(second)
    assert metrics.textfile_name(first) == "tfboot-tfboot-n1-0-slurm-101.0.prom"
    paths = {metrics.write_textfile(str(tmp_path), r) for r in (first, second)}
    assert len(paths) == 2 and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        Path(p).name for p in paths
    )
    series = set()  # node-exporter refuses the same series from two files
    for path in paths:
        for family in text_string_to_metric_families(Path(path).read_text()):
            series |= {(s.name, tuple(sorted(s.labels.items()))) for s in family.samples}
    assert len(series) == 2 * len({name for name, _ in series})


def test_two_steps_and_two_bare_jobs_keep_apart_and_a_pod_is_named_alone() -> None:
    assert metrics.identity(slurm_record("7", "0")) != metrics.identity(slurm_record("7", "1"))
    bare = [{"labels": {"job": "tfboot", "pod": "host"}, "run": {"id": f"host-{pid}-1700000000"}}
            for pid in (41, 42)]  # fmt: skip
    assert metrics.textfile_name(bare[0]) != metrics.textfile_name(bare[1])
    pod = {"labels": {"job": "tfboot", "pod": "train-0", "namespace": "ml"},
           "run": {"id": "train-0-1-1700000000"}}  # fmt: skip
    assert metrics.identity(pod) == {"instance": "train-0", "namespace": "ml"}
    assert metrics.textfile_name(pod) == "tfboot-tfboot-ml-train-0.prom"


def test_names_made_safe_or_short_still_keep_two_jobs_apart() -> None:
    runs = ["torchrun-a/b", "torchrun-a_b", "torchrun-" + "x" * 300, "torchrun-" + "x" * 301]
    names = [metrics.textfile_name({"labels": {"pod": "p"}, "run": {"id": r}}) for r in runs]
    assert len(set(names)) == len(names)
    for name in names:
        assert len(name) < 255 and name.endswith(".prom") and "/" not in name


class Paths(http.server.BaseHTTPRequestHandler):
    """A Pushgateway that answers 200 and keeps each request's path."""

    seen: ClassVar[list[str]] = []

    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Paths.seen.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def gateway() -> Iterator[str]:
    Paths.seen = []
    yield from serve(Paths)


def test_two_slurm_jobs_push_to_two_groups_escaped_as_the_gateway_wants(gateway: str) -> None:
    pytest.importorskip("prometheus_client")
    torchrun = {"labels": {"job": "tfboot", "pod": "n1"}, "run": {"id": "torchrun-a/b c"},
                "final": True}  # fmt: skip
    for record in (slurm_record("101"), slurm_record("102"), torchrun):
        metrics.push(gateway, record, 5.0)
    assert Paths.seen[:2] == [
        "/metrics/job/tfboot/instance/n1/run/slurm-101.0/task/0",
        "/metrics/job/tfboot/instance/n1/run/slurm-102.0/task/0",
    ]
    # A value with "/" or " " goes base64 (URL-safe), as the Pushgateway's API requires.
    assert Paths.seen[2] == "/metrics/job/tfboot/instance/n1/run@base64/dG9yY2hydW4tYS9iIGM="


# -- 3. an exited child's record ----------------------------------------------------------------

TORCH_CHILD = "import torch\nprint('child', flush=True)\n"


@pytest.mark.slow
def test_an_exited_child_s_record_is_merged_and_removed_at_the_next_snapshot(
    tmp_path: Path,
) -> None:
    usage = tmp_path / "usage.json"
    code = f"""
        import json, os, subprocess, sys, time, torch
        child = subprocess.run([sys.executable, "-c", {TORCH_CHILD!r}], check=True)
        drop = json.loads(os.environ["TFBOOT_USAGE_RUN"])["drop"]
        time.sleep(2.5)  # a snapshot or two
        print("left", len(os.listdir(drop)), flush=True)
        print("members", len(json.load(open({str(usage)!r})).get("members", [])), flush=True)
    """
    done = run(code, {"TFBOOT_USAGE_FILE": str(usage), "TFBOOT_USAGE_INTERVAL": "1"})
    assert done.returncode == 0, done.stderr
    assert "left 0" in done.stdout and "members 1" in done.stdout, done.stdout
    record = json.loads(usage.read_text())
    assert [m["final"] for m in record["members"]] == [True]
    [line] = [x for x in done.stderr.splitlines() if x.startswith("tfboot: used:")]
    assert line.startswith("tfboot: used: job of 2 processes;"), line


# -- 4. a child shorter than the sampling interval ----------------------------------------------

HOLD = "b = bytearray(400 << 20)\nimport time\ntime.sleep(0.5)\n"


@pytest.mark.slow
def test_a_short_child_s_memory_counts_with_its_parent_s(tmp_path: Path) -> None:
    """No cgroup of the job's own here: the process tree is the scope, sampled each 30 s.
    The child held 400 MiB while its parent held 400 MiB: the job needed both."""
    usage = tmp_path / "usage.json"
    code = f"""
        import subprocess, sys, torch
        mine = bytearray(400 << 20)
        subprocess.run([sys.executable, "-c", {HOLD!r}], check=True)
    """
    done = run(code, {"TFBOOT_USAGE_FILE": str(usage)})
    assert done.returncode == 0, done.stderr
    record = json.loads(usage.read_text())
    memory = record["host_memory"]
    if memory["scope"]["covers"] == "cgroup":
        pytest.skip(f"this test runs in a cgroup of its own: {memory['scope']['why']}")
    assert memory["peak_mib"] >= 800, memory
    limit = record["suggest"]["resources"]["limits"]["memory"]
    assert limit.endswith("Mi") and int(limit[:-2]) >= 800, limit


def member(started: str, at: str, peak: float, covers: str = "process tree") -> dict[str, Any]:
    return {"started": f"2026-01-01T00:00:{started}Z", "at": f"2026-01-01T00:00:{at}Z",
            "host_memory": {"peak_mib": peak, "scope": {"covers": covers}}}  # fmt: skip


def test_members_that_ran_together_add_up_and_others_do_not() -> None:
    assert together_mib([member("00", "05", 400), member("03", "08", 300)]) == 700
    assert together_mib([member("00", "02", 400), member("03", "08", 300)]) == 400
    assert together_mib([member("00", "03", 400), member("03", "08", 300)]) == 700  # one second
    assert together_mib([member("00", "05", 400, covers="cgroup"), member("00", "05", 1)]) == 1
    assert together_mib([{"host_memory": {"peak_mib": 5}}, {}]) == 0


# -- 5. the signal wakeup fd --------------------------------------------------------------------


@pytest.fixture(scope="module")
def trio_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Trio, where this interpreter has it, else installed into a directory of its own."""
    try:
        import trio  # noqa: F401
    except ImportError:
        target = tmp_path_factory.mktemp("trio")
        installed = subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                                    "--disable-pip-version-check", "--target", str(target),
                                    "trio"], capture_output=True, text=True,
                                   timeout=300)  # fmt: skip
        if installed.returncode != 0:
            unavailable(f"trio could not be installed: {installed.stderr[-300:]}")
        return str(target)
    return ""


@pytest.mark.slow
def test_trio_finds_the_wakeup_fd_free_after_the_framework_s_import(trio_path: str) -> None:
    code = f"""
        import sys, warnings
        sys.path.append({trio_path!r})
        warnings.simplefilter("error")  # trio's "collided with another library" fails the run
        import torch, trio
        async def main():
            return 1
        print(trio.run(main) + trio.run(main), flush=True)
    """
    done = run(code, {})
    assert done.returncode == 0 and done.stdout.strip() == "2", done.stderr


def test_the_wakeup_fd_is_left_free() -> None:
    code = """
        import signal, torch
        print(signal.set_wakeup_fd(-1), flush=True)
    """
    done = run(code, {})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "-1"
