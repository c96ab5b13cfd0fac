"""Fixtures for the Kubernetes tests: a kubectl with kustomize v5, and the rendered overlays.

Without kubectl the tests are skipped with the reason shown, except under ``CI=true``,
where that is a failure; a kubectl whose kustomize is older than v5 always fails. The
Pod-emulation tests also use the container tests' session fixtures (``docker_engine``,
``tfboot_image``), loaded from ``tests/docker/conftest.py``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent / "docker")]

from kustomize import (  # noqa: E402
    K8S,
    MIN_KUSTOMIZE,
    OVERLAYS,
    documents,
    find_kubectl,
    kustomize_version,
    render_text,
)
from support import unavailable  # noqa: E402


def _load_docker_fixtures() -> Any:
    path = HERE.parent / "docker" / "conftest.py"
    spec = importlib.util.spec_from_file_location("tfboot_tests_docker_fixtures", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_docker = _load_docker_fixtures()
docker_engine = _docker.docker_engine
tfboot_image = _docker.tfboot_image


@pytest.fixture(scope="session")
def kubectl() -> str:
    """Path of a kubectl whose built-in kustomize is v5 or later."""
    found = find_kubectl()
    if found is None:
        unavailable("kubectl not found (set KUBECTL or put kubectl 1.27+ on PATH)")
    version = kustomize_version(found)
    if version[:2] < MIN_KUSTOMIZE:
        pytest.fail(
            f"{found} has kustomize v{'.'.join(map(str, version))}; the overlays need v5 or "
            "later (replacements, components): use kubectl 1.27 or later"
        )
    return found


@pytest.fixture(scope="session")
def rendered(kubectl: str) -> dict[str, str]:
    """Each overlay's rendered YAML, by overlay name."""
    return {name: render_text(kubectl, K8S / "overlays" / name) for name in OVERLAYS}


@pytest.fixture(scope="session")
def rendered_docs(rendered: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    """Each overlay's rendered documents, by overlay name."""
    return {name: documents(text) for name, text in rendered.items()}
