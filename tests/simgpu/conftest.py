"""Fixtures for the simulated-GPU tests: a scenario runner per TensorFlow (see scenarios.py).

A venv that is missing or lacks TensorFlow or tfboot skips its tests, except under
``CI=true``, where that fails them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from simgpu.scenarios import NIGHTLY_PYTHON, STABLE_PYTHON, SimGpu, ready_plugin


@pytest.fixture(scope="session")
def stable_plugin() -> Path:
    """The plugin built for ``.venv`` (TensorFlow 2.21)."""
    return ready_plugin(STABLE_PYTHON)


@pytest.fixture(scope="session")
def nightly_plugin() -> Path:
    """The plugin built for ``.venv-nightly`` (the pinned tf-nightly-cpu)."""
    return ready_plugin(NIGHTLY_PYTHON)


def closing(gpu: SimGpu) -> Iterator[SimGpu]:
    """Yield ``gpu``, then remove its shared segments."""
    try:
        yield gpu
    finally:
        gpu.close()


@pytest.fixture
def stable_gpu(stable_plugin: Path, tmp_path: Path) -> Iterator[SimGpu]:
    """Scenarios on TensorFlow 2.21 (no shim: logical devices are ignored there)."""
    yield from closing(SimGpu(STABLE_PYTHON, stable_plugin, tmp_path, shim=False))


@pytest.fixture
def nightly_gpu(nightly_plugin: Path, tmp_path: Path) -> Iterator[SimGpu]:
    """Scenarios on the pinned nightly, with the test-only pluggable shim."""
    yield from closing(SimGpu(NIGHTLY_PYTHON, nightly_plugin, tmp_path, shim=True))


@pytest.fixture
def nightly_gpu_without_shim(nightly_plugin: Path, tmp_path: Path) -> Iterator[SimGpu]:
    """The pinned nightly as shipped: logical-device config never reaches the plugin."""
    yield from closing(SimGpu(NIGHTLY_PYTHON, nightly_plugin, tmp_path, shim=False))
