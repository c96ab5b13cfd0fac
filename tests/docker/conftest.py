"""Session fixtures for the container tests: a running engine and the tfboot image.

The engine comes from ``scripts/ensure-docker.sh``. Where it cannot be had, the tests are
skipped with the reason shown, except under ``CI=true``, where that is a failure. Each image
is the project's ``docker/Dockerfile`` built on a locally made stand-in for the TensorFlow
base image (see ``image_builds.py``), cached across runs under a content tag; builds are
serialised by a lock, so pytest-xdist workers (and ``scripts/test.sh``'s background build)
share them. ``tfboot_image`` is the default one (Python 3.11); ``tf_image`` runs a test on
every Python that has TensorFlow, ``any_python_image`` on every Python an image may carry;
``torch_image`` is Debian's PyTorch on Python 3.14, with no TensorFlow.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

# The shared helpers in tests/support.py, also when only this directory is collected.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from image_builds import (
    DEFAULT_PYTHON,
    REPO,
    STANDINS,
    TORCH_STANDIN,
    build_standin_base,
    build_tfboot_image,
)
from support import unavailable

ENSURE_DOCKER = REPO / "scripts" / "ensure-docker.sh"
TF_PYTHONS = [python for python, recipe in STANDINS.items() if recipe.tf_requirement]


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """A Docker engine that answers, started by ``scripts/ensure-docker.sh`` when needed."""
    try:
        proc = subprocess.run(
            [str(ENSURE_DOCKER)],
            capture_output=True,
            text=True,
            timeout=900,
            stdin=subprocess.DEVNULL,
        )
        output = "" if proc.returncode == 0 else proc.stderr.strip() or f"exit {proc.returncode}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        output = str(exc)
    if output:
        # The script's last line says what went wrong; the lines before it give the detail.
        unavailable(f"no Docker engine: {output.splitlines()[-1]}\n{output[-4000:]}")


@functools.cache
def image_for(python: str) -> str:
    """Tag of the tfboot image on the stand-in base for ``python``, built once per process."""
    return build_tfboot_image(build_standin_base(STANDINS[python]))


@pytest.fixture(scope="session")
def tfboot_image(docker_engine: None) -> str:
    """Tag of the tfboot image built from ``docker/Dockerfile`` on the default stand-in."""
    return image_for(DEFAULT_PYTHON)


@pytest.fixture(scope="session")
def torch_image(docker_engine: None) -> str:
    """The tfboot image on Debian's PyTorch (2.14) and Python 3.14 (forkserver by default)."""
    return build_tfboot_image(build_standin_base(TORCH_STANDIN))


@pytest.fixture(scope="session")
def image_of(docker_engine: None) -> Callable[[str], str]:
    """Gives the tfboot image for a Python version (a key of ``STANDINS``)."""
    return image_for


@pytest.fixture(scope="session", params=TF_PYTHONS, ids=lambda python: f"py{python}")
def tf_image(request: pytest.FixtureRequest, docker_engine: None) -> str:
    """The tfboot image for each Python that has a TensorFlow wheel."""
    return image_for(request.param)


@pytest.fixture(scope="session", params=list(STANDINS), ids=lambda python: f"py{python}")
def any_python_image(request: pytest.FixtureRequest, docker_engine: None) -> tuple[str, str]:
    """``(Python version, tfboot image)`` for every Python an image may carry."""
    return request.param, image_for(request.param)
