"""Scenario runner for the simulated-GPU tests: the plugin per venv, and one fresh process per run.

Each scenario runs ``import tensorflow`` in a fresh interpreter of one of two venvs,
with only tfboot's environment variables set, on the simulated GPU built from
``sim.c`` (see README.md). ``.venv`` holds TensorFlow 2.21; ``.venv-nightly`` the
pinned tf-nightly-cpu, whose scenarios also load the test-only ``pluggable_shim``.
Both need the tfboot wheel installed (``scripts/test.sh`` does it). No pytest here:
the benchmarks use it too.

Each ``SimGpu`` has its own ``SIMGPU_NAMESPACE``: its processes share one simulated
device (``start`` runs several at once), and no other test's processes count against it.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support import REPO, last_json, run_module, run_python, scenario_env, unavailable

from simgpu.build import BuildError, build_plugin
from simgpu.segment import DeviceAccount, read_account, remove_segments

MIB = 1 << 20
STABLE_PYTHON = REPO / ".venv" / "bin" / "python"
NIGHTLY_PYTHON = REPO / ".venv-nightly" / "bin" / "python"
SHIM_DIR = Path(__file__).resolve().parent / "pluggable_shim"
DEFAULT_MEMORY_MB = "4096"  # small devices keep the BFC allocator's set-up cheap

_PROBE = (
    "import importlib.util, sys; "
    "assert 'tfboot' in sys.modules, 'tfboot is not installed (no tfboot.pth)'; "
    "assert importlib.util.find_spec('tensorflow'), 'tensorflow is not installed'"
)


def venv_problem(python: Path) -> str | None:
    """Why ``python`` cannot run scenarios (no venv, no TensorFlow, no tfboot), or None."""
    if not python.exists():
        return f"{python.relative_to(REPO)} does not exist"
    proc = subprocess.run([str(python), "-c", _PROBE], capture_output=True, text=True)
    if proc.returncode != 0:
        return f"{python.relative_to(REPO)}: {proc.stderr.strip().splitlines()[-1]}"
    return None


def ready_plugin(python: Path) -> Path:
    """The plugin for ``python``'s TensorFlow, once that venv is usable."""
    problem = venv_problem(python)
    if problem is not None:
        unavailable(problem)
    try:
        return build_plugin(python)
    except BuildError as exc:
        unavailable(str(exc))
        raise


def venvs_problem(*pythons: Path) -> str | None:
    """The first reason one of ``pythons`` cannot run scenarios, or None."""
    return next((problem for problem in map(venv_problem, pythons) if problem), None)


@dataclass
class SimRun:
    """One finished scenario: the process, and the plugin's allocation record."""

    proc: subprocess.CompletedProcess[str]
    record_path: Path

    @property
    def ok(self) -> bool:
        return self.proc.returncode == 0

    def check(self) -> SimRun:
        """Assert the scenario exited cleanly; return self."""
        assert self.ok, f"exit {self.proc.returncode}\nstdout:\n{self.proc.stdout}\n{self.stderr}"
        return self

    @property
    def stderr(self) -> str:
        return self.proc.stderr

    @property
    def output(self) -> dict[str, Any]:
        """The last JSON object the scenario printed."""
        return last_json(self.proc.stdout)

    def tfboot_lines(self, kind: str = "") -> list[str]:
        """tfboot's stderr lines; ``kind`` such as ``"warning"`` keeps only those."""
        prefix = f"tfboot: {kind}:" if kind else "tfboot:"
        return [line for line in self.stderr.splitlines() if line.startswith(prefix)]

    def device(self, ordinal: int) -> dict[str, Any]:
        """The allocation record of physical device ``ordinal``."""
        record = json.loads(self.record_path.read_text())
        return record["devices"][ordinal]


@dataclass
class SimJob:
    """A scenario started in the background; ``wait`` gives its ``SimRun``."""

    popen: subprocess.Popen[str]
    record_path: Path
    stdout: Path
    stderr: Path

    def wait(self, timeout: float = 300) -> SimRun:
        returncode = self.popen.wait(timeout)
        proc = subprocess.CompletedProcess(
            self.popen.args, returncode, self.stdout.read_text(), self.stderr.read_text()
        )
        return SimRun(proc, self.record_path)


@dataclass
class SimGpu:
    """Runs scenarios with one venv's TensorFlow on simulated GPUs."""

    python: Path
    plugin: Path
    workdir: Path
    shim: bool
    namespace: str = field(default_factory=lambda: f"t{uuid.uuid4().hex[:16]}")

    def __post_init__(self) -> None:
        self._ids = itertools.count()

    def _env(self, env: Mapping[str, str] | None, count: int, memory_mb: str) -> dict[str, str]:
        record = self.workdir / f"simgpu-record-{next(self._ids)}.json"
        full = {
            "TF_PLUGGABLE_DEVICE_LIBRARY_PATH": str(self.plugin),
            "SIMGPU_COUNT": str(count),
            "SIMGPU_MEMORY_MB": memory_mb,
            "SIMGPU_RECORD": str(record),
            "SIMGPU_NAMESPACE": self.namespace,
        }
        if self.shim:
            full["PYTHONPATH"] = str(SHIM_DIR)
        full.update(env or {})
        return full

    def run(
        self,
        code: str,
        env: Mapping[str, str] | None = None,
        *,
        count: int = 1,
        memory_mb: str = DEFAULT_MEMORY_MB,
    ) -> SimRun:
        """Run ``code`` in a fresh interpreter on ``count`` simulated GPUs."""
        full = self._env(env, count, memory_mb)
        proc = run_python(code, full, python=self.python, cwd=self.workdir)
        return SimRun(proc, Path(full["SIMGPU_RECORD"]))

    def tfboot(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        count: int = 1,
        memory_mb: str = DEFAULT_MEMORY_MB,
    ) -> SimRun:
        """Run ``python -m tfboot ARGS`` on ``count`` simulated GPUs."""
        full = self._env(env, count, memory_mb)
        proc = run_module(["tfboot", *args], full, python=self.python, cwd=self.workdir)
        return SimRun(proc, Path(full["SIMGPU_RECORD"]))

    def start(
        self,
        code: str,
        env: Mapping[str, str] | None = None,
        *,
        args: tuple[str, ...] = (),
        count: int = 1,
        memory_mb: str = DEFAULT_MEMORY_MB,
    ) -> SimJob:
        """Start ``code`` (with ``args``) in a fresh interpreter without waiting for it."""
        full = self._env(env, count, memory_mb)
        record = Path(full["SIMGPU_RECORD"])
        out, err = record.with_suffix(".out"), record.with_suffix(".err")
        with out.open("w") as stdout, err.open("w") as stderr:
            popen = subprocess.Popen(
                [str(self.python), "-c", code, *args],
                env=scenario_env(full),
                cwd=self.workdir,
                stdout=stdout,
                stderr=stderr,
                text=True,
            )
        return SimJob(popen, record, out, err)

    def account(self, ordinal: int = 0) -> DeviceAccount:
        """The shared accounting of device ``ordinal``, counting every process of this GPU."""
        return read_account(self.namespace, ordinal)

    def close(self) -> None:
        """Remove this GPU's shared segments (call once its processes have exited)."""
        remove_segments(self.namespace)
