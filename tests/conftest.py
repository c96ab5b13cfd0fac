"""Markers for the whole suite: which tests are slow (over 5 s on a 2-core machine).

Every test that starts a container, a simulated-GPU TensorFlow process, a cluster of
TensorFlow processes or the pinned nightly is slow by nature, and gets ``slow`` from its
other marker here; other slow tests carry ``@pytest.mark.slow`` themselves (measured with
``--durations``). ``pytest -m "not slow"`` is the quick set (see the README).

The tests that need a tfboot image (a fixture that gives one, or the ``image`` marker) run
last: on a full run ``scripts/test.sh`` builds the
images in the background, and the other tests run meanwhile instead of both workers
waiting on the build first (with an empty Docker cache that wait was about 20 minutes).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import release_ports, unavailable

SLOW_BY_NATURE = ("docker", "simgpu", "multiworker", "nightly", "slurm")
# The fixtures that give a tfboot image (tests/docker/conftest.py), building it if need be.
NEEDS_IMAGE = frozenset({"tfboot_image", "tf_image", "image_of", "any_python_image", "torch_image"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.get_closest_marker(name) for name in SLOW_BY_NATURE):
            item.add_marker(pytest.mark.slow)
    items.sort(key=needs_image)


def needs_image(item: pytest.Item) -> bool:
    """The test takes a tfboot image: it names a fixture that gives one, or is marked
    ``image`` (it looks its image's fixture up by name as it runs, which collection cannot
    see: run early, it waited out the background build inside its own call)."""
    named = NEEDS_IMAGE.intersection(getattr(item, "fixturenames", ()))
    return bool(named) or item.get_closest_marker("image") is not None


@pytest.fixture(autouse=True)
def _ports_released() -> Iterator[None]:
    """The ports a test took with ``free_ports`` are held until it ends, then let go."""
    yield
    release_ports()


NVML_SOURCE = Path(__file__).parent / "frameworks" / "fake_nvml" / "nvml.c"


@pytest.fixture(scope="session")
def nvml_library(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The NVML stand-in (no NVIDIA driver exists here), built once: the path to load it
    from (``TFBOOT_NVML_LIBRARY``); its GPUs come from ``FAKE_NVML_MIB``."""
    if shutil.which("gcc") is None:
        unavailable("gcc is needed to build the NVML stand-in")
    built = tmp_path_factory.mktemp("nvml") / "libnvidia-ml-fake.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(built), str(NVML_SOURCE)], check=True)
    return str(built)
