"""``tfboot suggest --patch`` as a real kustomize overlay: rendered by ``kubectl kustomize``
over the project's whole-GPU overlay, then checked clean by ``tfboot manifests``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kustomize import copy_k8s, documents, env_of, render_text

pytestmark = pytest.mark.k8s

RECORD = {
    "schema": "tfboot.usage/v1",
    "final": True,
    "gpus": [{"index": 0, "physical": 0, "framework": "TensorFlow", "peak_mib": 5000.0,
              "cap_mib": None}],
    "host_memory": {"peak_mib": 7000.0, "limit_mib": 16384, "oom_kills": 0, "high_events": 0},
    "cpu": {"used_cpus": 2.6, "quota": 4.0, "throttled_fraction": 0.0},
}  # fmt: skip


def tfboot(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfboot", *args], input=stdin,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_the_suggested_patch_renders_and_checks_clean(kubectl: str, tmp_path: Path) -> None:
    usage = tmp_path / "usage.json"
    usage.write_text(json.dumps(RECORD))
    k8s = copy_k8s(tmp_path)
    patch = tfboot("suggest", "--patch", "--name", "tfboot-train", str(usage))
    assert patch.returncode == 0, patch.stderr
    sized = k8s / "overlays" / "sized"
    sized.mkdir()
    (sized / "usage.yaml").write_text(patch.stdout)
    (sized / "kustomization.yaml").write_text(
        "resources:\n  - ../whole-gpu\npatches:\n  - path: usage.yaml\n"
        "    target:\n      kind: Job\n"
    )
    rendered = render_text(kubectl, sized)
    [job] = documents(rendered)
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert env_of(container)["MEMORY_LIMIT_MB"] == "5760"  # 5000 x 1.15 = 5750, up to 16 MiB
    assert container["resources"]["limits"] == {"cpu": "3", "memory": "8064Mi",
                                                "nvidia.com/gpu": 1}  # fmt: skip
    assert container["resources"]["requests"] == {"cpu": "3000m", "memory": "8064Mi"}
    checked = tfboot("manifests", "--strict", "-", stdin=rendered)
    assert checked.returncode == 0, checked.stdout + checked.stderr
