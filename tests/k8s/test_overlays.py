"""The shipped overlays render with real kustomize, validate, and pass ``tfboot manifests``.

Also: each number that must agree comes from one literal, so changing that literal in a
copy of the overlay changes every place it feeds, and the checker catches a mismatch.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from kustomize import (
    KUBERNETES_VERSIONS,
    OVERLAYS,
    containers,
    copy_k8s,
    documents,
    env_of,
    render_text,
    set_literal,
)
from tfboot import resolve
from tfboot.frameworks import HEADROOMS
from tfboot.manifests import Report, check_text, container_env, gpu_grant

pytestmark = pytest.mark.k8s

EXPECTED_OVERLAYS = {"cpu-only", "multi-worker", "shared-gpu-gpushare", "shared-gpu-hami",
                     "virtual-split", "whole-gpu"}  # fmt: skip
# What each overlay renders besides its Job: multi-worker's headless Service.
EXTRA_KINDS = {"multi-worker": ["Service"]}


def check(text: str) -> Report:
    report = Report()
    check_text("rendered", text, report)
    return report


def rules(report: Report) -> set[str]:
    return {finding.rule for finding in report.findings}


def only_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    found = [container for _, container in containers(docs)]
    assert len(found) == 1, found
    return found[0]


def test_every_use_has_an_overlay() -> None:
    assert set(OVERLAYS) == EXPECTED_OVERLAYS


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_one_hardened_job(
    rendered_docs: dict[str, list[dict[str, Any]]], overlay: str
) -> None:
    docs = rendered_docs[overlay]
    kinds = [doc["kind"] for doc in docs]
    assert kinds == [*EXTRA_KINDS.get(overlay, []), "Job"], "replacement sources must not render"
    container = only_container(docs)
    image = container["image"]
    assert image.rpartition(":")[2] not in ("", "latest") and "/" not in image.rpartition(":")[2]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_passes_strict_schema_validation(
    rendered_docs: dict[str, list[dict[str, Any]]], overlay: str, version: str
) -> None:
    for doc in rendered_docs[overlay]:
        kubernetes_validate.validate(doc, version, strict=True)


def test_kubernetes_validate_cli_accepts_all_overlays(
    rendered: dict[str, str], tmp_path: Path
) -> None:
    """The command users run in CI, once over every rendered overlay and both versions."""
    files = []
    for name, text in rendered.items():
        files.append(tmp_path / f"{name}.yaml")
        files[-1].write_text(text)
    for version in KUBERNETES_VERSIONS:
        proc = subprocess.run(
            [sys.executable, "-m", "kubernetes_validate", "--strict", "--quiet", "-k", version,
             *map(str, files)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_passes_tfboot_manifests_clean(rendered: dict[str, str], overlay: str) -> None:
    report = check(rendered[overlay])
    assert report.findings == [], "\n".join(f.line() for f in report.findings)
    assert (report.objects, report.containers) == (1, 1)


def test_downward_api_component_renders_valid_and_clean(kubectl: str, tmp_path: Path) -> None:
    k8s = copy_k8s(tmp_path)
    overlay = k8s / "overlays" / "cpu-only-downward"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "resources: [../cpu-only]\ncomponents: [../../components/cpu-threads-from-limit]\n"
    )
    text = render_text(kubectl, overlay)
    docs = documents(text)
    env = env_of(only_container(docs))
    assert env["CPU_THREADS"]["resourceFieldRef"]["divisor"] in ("1", 1)
    assert env["CPU_LIMIT_MILLICORES"]["resourceFieldRef"]["divisor"] == "1m"
    for version in KUBERNETES_VERSIONS:
        kubernetes_validate.validate(docs[0], version, strict=True)
    assert check(text).findings == []


def test_copied_overlay_takes_your_image(kubectl: str, tmp_path: Path) -> None:
    """The documented quick start: a copy of an overlay elsewhere, with its own image."""
    k8s = copy_k8s(tmp_path)
    mine = tmp_path / "deploy" / "train"
    shutil.copytree(k8s / "overlays" / "shared-gpu-hami", mine)
    text = (mine / "kustomization.yaml").read_text()
    text = text.replace("../../base", "../../k8s/base")
    text += (
        "images:\n  - name: ghcr.io/example/train\n"
        '    newName: registry.example.com/team/train\n    newTag: "2.3.0"\n'
    )
    (mine / "kustomization.yaml").write_text(text)
    rendered = render_text(kubectl, mine)
    assert only_container(documents(rendered))["image"] == "registry.example.com/team/train:2.3.0"
    assert check(rendered).findings == []


# ------------------------------------------------------------------ one literal per number


def render_with(kubectl: str, tmp_path: Path, overlay: str, env_file: str, **literals: str):
    """Render a copy of ``overlay`` with ``literals`` changed in its ``env_file``."""
    k8s = copy_k8s(tmp_path)
    for name, value in literals.items():
        set_literal(k8s / "overlays" / overlay / env_file, name, value)
    text = render_text(kubectl, k8s / "overlays" / overlay)
    return text, only_container(documents(text))


def test_hami_literals_set_share_and_cap(kubectl: str, tmp_path: Path) -> None:
    text, container = render_with(
        kubectl, tmp_path, "shared-gpu-hami", "share.env",
        GPU_MEMORY_MIB="16384", MEMORY_LIMIT_MB="15360",
    )  # fmt: skip
    assert str(container["resources"]["limits"]["nvidia.com/gpumem"]) == "16384"
    assert env_of(container)["MEMORY_LIMIT_MB"] == "15360"
    assert check(text).findings == []


def test_hami_share_below_cap_is_caught(kubectl: str, tmp_path: Path) -> None:
    text, container = render_with(
        kubectl, tmp_path, "shared-gpu-hami", "share.env", GPU_MEMORY_MIB="6144"
    )
    assert str(container["resources"]["limits"]["nvidia.com/gpumem"]) == "6144"
    report = check(text)
    assert rules(report) == {"gpu-memory-over-share"}
    assert report.count("error") == 1


def test_hami_cap_without_headroom_warns(kubectl: str, tmp_path: Path) -> None:
    text, _ = render_with(kubectl, tmp_path, "shared-gpu-hami", "share.env", MEMORY_LIMIT_MB="8000")
    report = check(text)
    assert rules(report) == {"gpu-memory-no-headroom"}
    assert report.count("error") == 0


def test_gpushare_literal_sets_share_and_the_cap_follows(kubectl: str, tmp_path: Path) -> None:
    """One literal: the resource, and (through the plugin's env, MEMORY_LIMIT_MB=auto) the cap:
    the share minus TensorFlow's headroom, which an advisory share keeps too."""
    text, container = render_with(
        kubectl, tmp_path, "shared-gpu-gpushare", "share.env", GPU_MEMORY_GIB="4"
    )
    limits = container["resources"]["limits"]
    assert str(limits["aliyun.com/gpu-mem"]) == "4"
    assert env_of(container)["MEMORY_LIMIT_MB"] == "auto"
    grant = gpu_grant(limits)
    assert grant.plugin_env == {"ALIYUN_COM_GPU_MEM_CONTAINER": "4"}
    plain = {k: v for k, v in env_of(container).items() if isinstance(v, str)}
    cap = 4096 - HEADROOMS["tensorflow"].mib
    assert resolve({**plain, **grant.plugin_env}).memory_limit_mb == cap == 2560
    assert check(text).findings == []


def test_cpu_literal_sets_request_and_limit(kubectl: str, tmp_path: Path) -> None:
    text, container = render_with(
        kubectl, tmp_path, "cpu-only", "runner.env", CPUS="1500m", MEMORY="6Gi"
    )
    resources = container["resources"]
    assert resources["requests"]["cpu"] == resources["limits"]["cpu"] == "1500m"
    assert resources["requests"]["memory"] == resources["limits"]["memory"] == "6Gi"
    assert check(text).findings == []


def test_checker_sees_the_env_the_plugin_adds(rendered_docs: dict[str, list[dict]]) -> None:
    """What the checker resolves for the HAMi overlay: the plugin's cap and tfboot's below it."""
    from tfboot.manifests import Container

    doc = rendered_docs["shared-gpu-hami"][0]
    pod = doc["spec"]["template"]["spec"]
    container = Container(pod["containers"][0], pod, ("f", "Job/x", "train"), {})
    grant = gpu_grant(container.resources("limits"))
    env = container_env(container, grant, Report())
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "8192m"
    assert resolve(env).memory_limit_mb == 6656
