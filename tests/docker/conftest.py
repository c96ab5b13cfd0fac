"""Session fixtures for the container tests: a running engine and the tfboot image.

The engine comes from ``scripts/ensure-docker.sh``. Where it cannot be had, the tests are
skipped with the reason shown, except under ``CI=true``, where that is a failure. The image
is the project's ``docker/Dockerfile`` built on a locally made stand-in for the TensorFlow
base image (see ``image_builds.py``), cached across runs under a content tag.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# The shared helpers in tests/support.py, also when only this directory is collected.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from image_builds import REPO, build_standin_base, build_tfboot_image
from support import unavailable

ENSURE_DOCKER = REPO / "scripts" / "ensure-docker.sh"


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


@pytest.fixture(scope="session")
def tfboot_image(docker_engine: None) -> str:
    """Tag of the tfboot image built from ``docker/Dockerfile`` on the stand-in base."""
    return build_tfboot_image(build_standin_base())
