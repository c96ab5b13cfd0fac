"""``tfboot manifests`` under DRA: the MPS limit NVIDIA's DRA driver keeps on the MPS daemon.

The driver hands the container only ``CUDA_MPS_PIPE_DIRECTORY``, so the cap must be in the
manifest: ``MEMORY_LIMIT_MB=auto`` under such a claim is an error, a cap above the limit
(or within 1024 MiB of it, the smallest framework headroom) is reported, and ``mps_caps``
gives the number to write: the limit minus TensorFlow's 1536 MiB (the largest), plus
NCCL's 1024 where it will run, or minus the container's own ``MEMORY_HEADROOM_MB``. Every
case runs the real entry (``main``) on real YAML: the claims of ``testdata/dra/claims.yaml``
and a hardened Pod that takes one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tfboot.kube.documents import parse_documents
from tfboot.manifests import main, mps_caps

pytestmark = pytest.mark.k8s

CLAIMS = (Path(__file__).resolve().parent / "testdata" / "dra" / "claims.yaml").read_text()
POD = """
apiVersion: v1
kind: Pod
metadata: {name: train}
spec:
  securityContext: {runAsNonRoot: true, runAsUser: 1000, seccompProfile: {type: RuntimeDefault}}
  resourceClaims: [{name: gpu, %(ref)s}]
  containers:
    - name: train
      image: registry.example.com/train:1.0.0
      env: [{name: MEMORY_LIMIT_MB, value: "%(cap)s"}]
      resources:
        requests: {cpu: "1", memory: 1Gi}
        limits: {cpu: "1", memory: 1Gi}
        claims: [{name: gpu%(request)s}]
      securityContext:
        readOnlyRootFilesystem: true
        allowPrivilegeEscalation: false
        capabilities: {drop: [ALL]}
      volumeMounts: [{name: tmp, mountPath: /tmp}]
  volumes: [{name: tmp, emptyDir: {}}]
"""


def pod(cap: str, template: str = "mps-10g", request: str = "", claim: str = "") -> str:
    ref = f"resourceClaimName: {claim}" if claim else f"resourceClaimTemplateName: {template}"
    return POD % {"ref": ref, "cap": cap, "request": f", request: {request}" if request else ""}


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *texts: str) -> tuple[int, list]:
    """``tfboot manifests --json --strict`` on the texts as one file: (status, findings)."""
    path = tmp_path / "rendered.yaml"
    path.write_text("\n---\n".join(texts))
    status = main(["--json", "--strict", str(path)])
    return status, json.loads(capsys.readouterr().out)["findings"]


@pytest.mark.parametrize("template", ["mps-10g", "mps-10g-v1beta1"])
def test_auto_under_an_mps_claim_is_an_error_with_the_cap_to_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], template: str
) -> None:
    status, (finding, *more) = run(tmp_path, capsys, CLAIMS, pod("auto", template))
    assert status == 1 and more == []
    assert (finding["rule"], finding["severity"]) == ("dra-mps-memory-auto", "error")
    assert f"ResourceClaimTemplate/{template} request mps-gpu" in finding["message"]
    assert "defaultPinnedDeviceMemoryLimit=10Gi (10240 MiB)" in finding["message"]
    assert "CUDA_MPS_PIPE_DIRECTORY" in finding["message"]
    assert finding["hint"].startswith("set MEMORY_LIMIT_MB to 8704 (the limit minus 1536 MiB")
    assert "PyTorch and JAX need 1024 MiB" in finding["hint"]


def test_the_limit_minus_the_headroom_is_clean(tmp_path: Path, capsys) -> None:
    assert run(tmp_path, capsys, CLAIMS, pod("8704")) == (0, [])


def test_a_cap_that_leaves_pytorchs_headroom_is_clean(tmp_path: Path, capsys) -> None:
    """The warning fires below the smallest headroom (1024 MiB): the cap may be PyTorch's."""
    assert run(tmp_path, capsys, CLAIMS, pod("9216")) == (0, [])


@pytest.mark.parametrize(
    ("cap", "rule", "severity"),
    [("9217", "gpu-memory-no-headroom", "warning"), ("12288", "gpu-memory-over-share", "error")],
)
def test_a_cap_above_the_limit_minus_the_headroom(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cap: str, rule: str, severity: str
) -> None:
    status, (finding,) = run(tmp_path, capsys, CLAIMS, pod(cap))
    assert status == 1 and (finding["rule"], finding["severity"]) == (rule, severity)
    assert f"TensorFlow gets {cap} MiB per GPU" in finding["message"]
    assert "10240 MiB per GPU (the MPS limit of ResourceClaimTemplate/mps-10g" in finding["message"]
    assert "8704" in finding["hint"] and "1536 MiB of headroom for TensorFlow" in finding["hint"]


def test_a_per_device_limit_below_the_default_holds(tmp_path: Path, capsys) -> None:
    """A ResourceClaim (v1beta2) shared by Pods; device 0's 5Gi is the smallest limit. Its
    two GPUs count: NCCL will run between them."""
    status, (finding, shm) = run(tmp_path, capsys, CLAIMS, pod("auto", claim="mps-per-device"))
    assert status == 1 and finding["rule"] == "dra-mps-memory-auto"
    assert shm["rule"] == "nccl-shm" and shm["message"].startswith("2 GPUs")
    where = "ResourceClaim/mps-per-device request gpus: defaultPerDevicePinnedMemoryLimit[0]=5Gi"
    assert where in finding["message"]
    assert finding["hint"].startswith("set MEMORY_LIMIT_MB to 2560 ")  # 5120 - 1536 - NCCL's 1024
    assert "1024 MiB for NCCL: several GPUs visible" in finding["hint"]


# The whole claim ("") is both requests: two GPUs, so NCCL's 1024 MiB comes off too.
@pytest.mark.parametrize(("request_name", "cap"), [("shared", 4608), ("", 3584), ("whole", None)])
def test_config_scoped_to_requests_the_last_one_winning(request_name: str, cap: int | None) -> None:
    docs = parse_documents(CLAIMS + "\n---\n" + pod("auto", "mps-scoped", request_name))
    assert mps_caps(docs).get(("Pod/train", "", "train")) == cap


def test_a_request_without_mps_gets_no_dra_finding_but_auto_still_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, (finding,) = run(tmp_path, capsys, CLAIMS, pod("auto", "mps-scoped", "whole"))
    assert status == 1 and finding["rule"] == "memory-auto-without-share"
    assert "NVIDIA's DRA driver sets none there" in finding["message"]


def test_a_gpu_from_a_claim_is_a_gpu(tmp_path: Path, capsys) -> None:
    """A cap under a whole GPU from a claim is no GPU setting without a GPU."""
    assert run(tmp_path, capsys, CLAIMS, pod("4096", "mps-scoped", "whole")) == (0, [])


def test_alternatives_count_their_smallest_limit(tmp_path: Path, capsys) -> None:
    status, (finding,) = run(tmp_path, capsys, CLAIMS, pod("8192", "mps-first-available"))
    assert status == 1 and finding["rule"] == "gpu-memory-over-share"
    assert "request gpu/small: defaultPinnedDeviceMemoryLimit=4Gi" in finding["message"]
    assert "at most 2560" in finding["hint"]


def test_an_unreadable_limit_is_a_quantity_finding(tmp_path: Path, capsys) -> None:
    status, findings = run(tmp_path, capsys, CLAIMS, pod("4096", "mps-unreadable"))
    assert status == 1 and [f["rule"] for f in findings] == ["quantity-invalid"]
    message = findings[0]["message"]
    assert "defaultPinnedDeviceMemoryLimit='ten gigs': expected a quantity" in message


def test_a_claim_not_in_the_inputs_is_a_note_that_never_fails(tmp_path: Path, capsys) -> None:
    status, (finding,) = run(tmp_path, capsys, pod("7168", "elsewhere"))
    assert status == 0
    assert (finding["rule"], finding["severity"]) == ("dra-claim-not-found", "note")
    assert "ResourceClaimTemplate/elsewhere" in finding["message"]


def test_mps_caps_names_each_container_by_object_group_and_name() -> None:
    job = """
apiVersion: batch/v1
kind: Job
metadata: {name: train}
spec:
  template:
    spec:
      resourceClaims: [{name: gpu, resourceClaimTemplateName: mps-10g}]
      initContainers: [{name: warm, image: x:1, resources: {claims: [{name: gpu}]}}]
      containers:
        - {name: train, image: x:1, resources: {claims: [{name: gpu, request: mps-gpu}]}}
        - {name: sidecar, image: x:1}
"""
    docs = parse_documents("\n---\n".join([CLAIMS, job, pod("auto", "elsewhere")]))
    assert mps_caps(docs) == {("Job/train", "", "warm"): 8704, ("Job/train", "", "train"): 8704}


def pod_env(cap: str, **env: str) -> str:
    """``pod(cap)`` with more env entries in its container."""
    entries = "".join(f', {{name: {name}, value: "{value}"}}' for name, value in env.items())
    return pod(cap).replace(f'value: "{cap}"}}]', f'value: "{cap}"}}{entries}]')


@pytest.mark.parametrize(
    ("env", "cap"),
    [
        ({"MEMORY_HEADROOM_MB": "2048"}, 8192),  # the container's own figure
        ({"MEMORY_HEADROOM_MB": "0"}, 10240),
        ({"DISTRIBUTED": "k8s"}, 7680),  # NCCL will run: 1536 + 1024
        ({"DISTRIBUTED": "off"}, 8704),
    ],
)
def test_the_mps_advice_keeps_the_containers_headroom(env: dict[str, str], cap: int) -> None:
    docs = parse_documents(CLAIMS + "\n---\n" + pod_env("auto", **env))
    assert mps_caps(docs) == {("Pod/train", "", "train"): cap}


def test_the_advice_names_the_headroom_given(tmp_path: Path, capsys) -> None:
    status, (finding,) = run(tmp_path, capsys, CLAIMS, pod_env("auto", MEMORY_HEADROOM_MB="2048"))
    assert status == 1 and finding["rule"] == "dra-mps-memory-auto"
    assert finding["hint"] == (
        "set MEMORY_LIMIT_MB to 8192 (the limit minus 2048 MiB of headroom "
        "(MEMORY_HEADROOM_MB=2048, the container's own))"
    )


def test_a_limit_at_the_headroom_leaves_no_cap(tmp_path: Path, capsys) -> None:
    """1024 MiB of headroom given, and a cap leaving 1000 MiB: below the figure given."""
    status, (finding,) = run(tmp_path, capsys, CLAIMS, pod_env("9240", MEMORY_HEADROOM_MB="1024"))
    assert status == 1 and finding["rule"] == "gpu-memory-no-headroom"
    assert "1000 MiB left" in finding["message"] and "9216" in finding["hint"]
