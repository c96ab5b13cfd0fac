"""Every workload a user can paste from the README and docs/ passes ``tfboot manifests
--strict``: the examples are held to the project's own check (notes allowed)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = re.compile(r"^kind: (Pod|Job|JobSet|Deployment|StatefulSet|CronJob|PyTorchJob|TFJob)\b",
                      re.MULTILINE)  # fmt: skip


def examples() -> list[tuple[str, str]]:
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```yaml\n(.*?)```", path.read_text(), re.DOTALL):
            if WORKLOAD.search(block):
                found.append((path.name, block))
    return found


def test_the_readme_and_docs_hold_workload_examples() -> None:
    assert {name for name, _ in examples()} >= {"README.md", "kubernetes.md"}


@pytest.mark.parametrize(("name", "block"), examples(), ids=lambda x: str(x)[:24])
def test_each_pasteable_workload_passes_the_check(name: str, block: str) -> None:
    done = subprocess.run([sys.executable, "-m", "tfboot", "manifests", "--strict", "-"],
                          input=block, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, f"{name}:\n{done.stdout}{done.stderr}"
