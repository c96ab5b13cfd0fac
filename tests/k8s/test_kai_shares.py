"""``tfboot manifests`` under KAI Scheduler's fractional GPUs, and the per-framework headroom.

A Pod with ``schedulerName: kai-scheduler`` asks for ``gpu-memory`` (MiB) or ``gpu-fraction``
(of one GPU) through annotations; KAI hands the share to one container, which sees it only
once bound. So ``MEMORY_LIMIT_MB=auto`` there is no "auto without a share": the checker
says the cap auto will take (the share minus TensorFlow's 1536 MiB, the largest headroom,
plus NCCL's 1024 with several GPUs, or the container's ``MEMORY_HEADROOM_MB``), and a share
at or below that headroom is an error naming both. Every case runs the real entry
(``main``) on real YAML: ``testdata/kai/pods.yaml`` and Pods built from it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from tfboot.kube.kai import kai_share
from tfboot.manifests import main

pytestmark = pytest.mark.k8s

PODS = Path(__file__).resolve().parent / "testdata" / "kai" / "pods.yaml"


def docs() -> list[dict[str, Any]]:
    return list(yaml.safe_load_all(PODS.read_text()))


def named(name: str) -> dict[str, Any]:
    return next(doc for doc in docs() if doc["metadata"]["name"] == name)


def kai_pod(annotations: dict[str, Any], *env: tuple[str, str], **limits: Any) -> dict[str, Any]:
    """testdata's gpu-memory Pod with other annotations, env and limits."""
    pod = named("gpu-memory")
    pod["metadata"]["annotations"] = annotations
    container = pod["spec"]["containers"][0]
    container["env"] = [{"name": name, "value": value} for name, value in env]
    container["resources"]["limits"].update(limits)
    return pod


def run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], *objects: dict[str, Any]
) -> tuple[int, list[dict[str, str]]]:
    """``tfboot manifests --json --strict`` on the objects as one file: (status, findings)."""
    path = tmp_path / "rendered.yaml"
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    status = main(["--json", "--strict", str(path)])
    return status, json.loads(capsys.readouterr().out)["findings"]


def only(findings: list[dict[str, str]]) -> dict[str, str]:
    assert len(findings) == 1, findings
    return findings[0]


def test_testdata_is_clean_but_for_the_notes(tmp_path: Path, capsys) -> None:
    status, findings = run(tmp_path, capsys, *docs())
    assert status == 0
    assert [(f["object"], f["container"], f["rule"], f["severity"]) for f in findings] == [
        ("Pod/gpu-memory", "train", "kai-share-cap", "note"),
        ("Job/gpu-fraction", "train", "kai-share-cap", "note"),
        ("Job/two-gpus", "train", "kai-share-cap", "note"),
    ]


def test_gpu_memory_gives_the_share_minus_tensorflows_headroom(tmp_path: Path, capsys) -> None:
    status, findings = run(tmp_path, capsys, named("gpu-memory"))
    finding = only(findings)
    assert status == 0 and finding["rule"] == "kai-share-cap"
    message = finding["message"]
    assert message.startswith(
        'MEMORY_LIMIT_MB=auto takes KAI\'s share of 4096 MiB per GPU (gpu-memory: "4096") '
        "minus 1536 MiB of headroom for TensorFlow (TensorFlow's own reserve"
    )
    assert (
        "PyTorch and JAX need 1024 MiB): TensorFlow 2560 MiB, PyTorch and JAX 3072 MiB" in message
    )
    assert (
        "enforced under KAI's nvfractions mode" in message and "NVIDIA_GPU_MEMORY_LIMITS" in message
    )
    assert "advisory under gpusharing" in message and "GPU_PORTION" in message
    assert (
        finding["hint"]
        == "nothing to change; MEMORY_LIMIT_MB=2560 pins TensorFlow's cap in either mode"
    )


def test_the_cap_written_is_clean(tmp_path: Path, capsys) -> None:
    assert run(tmp_path, capsys, kai_pod({"gpu-memory": "4096"}, ("MEMORY_LIMIT_MB", "2560"))) == (
        0,
        [],
    )


def test_gpu_fraction_gives_the_formula_and_an_80_gib_example(tmp_path: Path, capsys) -> None:
    """The GPU's memory is unknown offline. The Job's first container, a sidecar, gets no
    share: the annotation names the training container. VIRTUAL_SPLIT=2 under auto is
    planned on the example GPU, so it needs no cap of its own."""
    status, findings = run(tmp_path, capsys, named("gpu-fraction"))
    finding = only(findings)
    assert status == 0 and (finding["container"], finding["rule"]) == ("train", "kai-share-cap")
    message = finding["message"]
    assert "KAI's share (gpu-fraction: \"0.5\") of each GPU's memory minus 1536 MiB" in message
    assert ": 0.5 x the GPU's MiB - 1536. The GPU's memory is unknown offline;" in message
    assert (
        "on an 80 GiB GPU (81920 MiB) the share is 40960 MiB: TensorFlow 39424 MiB, "
        "PyTorch and JAX 39936 MiB, and a GPU of 3072 MiB or less leaves no cap" in message
    )
    assert finding["hint"].endswith("set MEMORY_LIMIT_MB to 0.5 x your GPU's MiB - 1536")


def test_a_share_at_or_below_the_headroom_is_an_error_naming_both(tmp_path: Path, capsys) -> None:
    status, findings = run(
        tmp_path, capsys, kai_pod({"gpu-memory": "1536"}, ("MEMORY_LIMIT_MB", "auto"))
    )
    finding = only(findings)
    assert status == 1 and (finding["rule"], finding["severity"]) == (
        "share-below-headroom",
        "error",
    )
    assert (
        "the share of 1536 MiB per GPU is at or below 1536 MiB of headroom for TensorFlow"
        in (finding["message"])
    )
    assert "PyTorch and JAX need 1024 MiB" in finding["message"]
    assert "ask for more gpu-memory (above 1536 MiB)" in finding["hint"]
    assert "MEMORY_HEADROOM_MB" in finding["hint"]


def test_a_hami_share_below_the_headroom_is_not_auto_without_a_share(
    tmp_path: Path, capsys
) -> None:
    """settings' problem for a share at or below the headroom is told apart from auto with no
    share at all."""
    pod = kai_pod({}, ("MEMORY_LIMIT_MB", "auto"))
    pod["spec"].pop("schedulerName")
    pod["spec"]["containers"][0]["resources"]["limits"].update(
        {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1024}
    )
    status, findings = run(tmp_path, capsys, pod)
    finding = only(findings)
    assert status == 1 and finding["rule"] == "share-below-headroom"
    assert (
        "the share of 1024 MiB for GPU 0 (HAMi CUDA_DEVICE_MEMORY_LIMIT_0=1024m)"
        in finding["message"]
    )
    assert "at or below 1536 MiB of headroom for TensorFlow" in finding["message"]
    assert finding["message"].endswith(
        "(judged for TensorFlow, whose headroom is the largest: the container names no framework "
        "(KERAS_BACKEND, a torchrun command, its image); PyTorch and JAX keep 1024 MiB)"
    )


@pytest.mark.parametrize(
    ("spec", "env", "name"),
    [
        ({"command": ["torchrun", "--nproc-per-node=1", "train.py"]}, (), "PyTorch"),
        ({"image": "registry.example/team/pytorch-train:2.9"}, (), "PyTorch"),
        ({}, (("KERAS_BACKEND", "jax"),), "JAX"),
    ],
)
def test_a_share_is_judged_by_the_framework_the_container_names(
    tmp_path: Path, capsys, spec: dict[str, Any], env: tuple, name: str
) -> None:
    """A 1536 MiB share leaves TensorFlow nothing, and PyTorch or JAX 512 MiB: a container
    whose spec names its framework is judged by that framework's headroom. (Each is given a
    memory-backed /dev/shm, so a PyTorch container's DataLoader gets no note of its own.)"""
    hami = kai_pod({}, ("MEMORY_LIMIT_MB", "auto"), *env)
    hami["spec"]["volumes"].append(
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "256Mi"}}
    )
    spec = {
        **spec,
        "volumeMounts": [
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "shm", "mountPath": "/dev/shm"},
        ],
    }
    hami["spec"].pop("schedulerName")
    hami["spec"]["containers"][0].update(spec)
    hami["spec"]["containers"][0]["resources"]["limits"].update(
        {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1536}
    )
    status, findings = run(tmp_path, capsys, hami)
    assert status == 0 and findings == [], findings
    kai = kai_pod({"gpu-memory": "1536"}, ("MEMORY_LIMIT_MB", "auto"), *env)
    kai["spec"]["volumes"].append(hami["spec"]["volumes"][-1])
    kai["spec"]["containers"][0].update(spec)
    status, findings = run(tmp_path, capsys, kai)
    finding = only(findings)
    assert status == 0 and finding["rule"] == "kai-share-cap", finding
    assert f"minus 1024 MiB of headroom for {name} (" in finding["message"]
    assert f": {name} 512 MiB." in finding["message"]


@pytest.mark.parametrize(
    ("headroom", "share", "text"),
    [
        ("512", "4096", "every framework 3584 MiB"),
        ("512", "1024", "every framework 512 MiB"),  # below TensorFlow's 1536: allowed
        ("0", "4096", "every framework 4096 MiB"),
    ],
)
def test_memory_headroom_mb_replaces_the_figure(
    tmp_path: Path, capsys, headroom: str, share: str, text: str
) -> None:
    pod = kai_pod(
        {"gpu-memory": share}, ("MEMORY_LIMIT_MB", "auto"), ("MEMORY_HEADROOM_MB", headroom)
    )
    status, findings = run(tmp_path, capsys, pod)
    finding = only(findings)
    assert status == 0 and finding["rule"] == "kai-share-cap"
    shown = f"minus {headroom} MiB of headroom (MEMORY_HEADROOM_MB={headroom}, the container's own)"
    assert shown in finding["message"] and f": {text}." in finding["message"]


def test_memory_headroom_mb_makes_the_warning_figure_too(tmp_path: Path, capsys) -> None:
    """3500 MiB under 4096 leaves 596: a warning below 1024, clean when 512 is given."""
    capped = ("MEMORY_LIMIT_MB", "3500")
    status, findings = run(tmp_path, capsys, kai_pod({"gpu-memory": "4096"}, capped))
    finding = only(findings)
    assert status == 1 and finding["rule"] == "gpu-memory-no-headroom"
    assert "596 MiB left" in finding["message"] and "less than the 1024 MiB" in finding["message"]
    assert 'KAI\'s gpu-memory: "4096"' in finding["message"]
    assert finding["hint"].startswith("set MEMORY_LIMIT_MB to 2560 or less (the share minus 1536")
    given = kai_pod({"gpu-memory": "4096"}, capped, ("MEMORY_HEADROOM_MB", "512"))
    assert run(tmp_path, capsys, given) == (0, [])


def test_nccl_adds_its_headroom_with_several_gpus(tmp_path: Path, capsys) -> None:
    status, findings = run(tmp_path, capsys, named("two-gpus"))
    finding = only(findings)
    assert status == 0 and finding["rule"] == "kai-share-cap"
    assert 'on 2 GPUs (gpu-fraction-num-devices: "2")' in finding["message"]
    assert "minus 2560 MiB of headroom for TensorFlow" in finding["message"]
    assert (
        "and 1024 MiB for NCCL: several GPUs visible; PyTorch and JAX need 2048 MiB"
        in finding["message"]
    )
    assert "TensorFlow 5632 MiB, PyTorch and JAX 6144 MiB" in finding["message"]


def test_nccl_headroom_under_distributed_on_one_gpu(tmp_path: Path, capsys) -> None:
    """Any cap leaving less than PyTorch's 1024 + NCCL's 1024 warns where DISTRIBUTED finds an
    engine in the Pod's variables, as at import (an Indexed Job's index comes at run time)."""
    pod = kai_pod({"gpu-memory": "8192"}, ("MEMORY_LIMIT_MB", "6656"), ("DISTRIBUTED", "auto"),
                  ("DIST_TASKS", "2"), ("DIST_HOSTS", "worker=w-{i}.train"))  # fmt: skip
    pod["spec"]["containers"][0]["volumeMounts"].append({"name": "shm", "mountPath": "/dev/shm"})
    pod["spec"]["volumes"].append(
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "256Mi"}}
    )
    status, findings = run(tmp_path, capsys, pod)
    finding = only(findings)
    assert status == 1 and finding["rule"] == "gpu-memory-no-headroom"
    assert (
        "1536 MiB left" in finding["message"] and "the 2048 MiB any framework" in finding["message"]
    )
    assert "set MEMORY_LIMIT_MB to 5632 or less" in finding["hint"]
    assert "1024 MiB for NCCL: DISTRIBUTED=auto found k8s" in finding["hint"]


def test_a_cap_over_the_share_is_an_error(tmp_path: Path, capsys) -> None:
    status, findings = run(
        tmp_path, capsys, kai_pod({"gpu-memory": "4096"}, ("MEMORY_LIMIT_MB", "6000"))
    )
    finding = only(findings)
    assert status == 1 and finding["rule"] == "gpu-memory-over-share"
    assert (
        'more than the share of 4096 MiB per GPU (KAI\'s gpu-memory: "4096")' in finding["message"]
    )
    assert finding["hint"].startswith(
        "lower MEMORY_LIMIT_MB to at most 2560 (the share minus 1536 MiB"
    )
    assert finding["hint"].endswith("or raise KAI's gpu-memory")


@pytest.mark.parametrize("annotations", [{"gpu-memory": "4096"}, {"gpu-fraction": "0.25"}])
def test_a_share_without_a_cap_is_an_error(tmp_path: Path, capsys, annotations: dict) -> None:
    """Under gpusharing nothing enforces KAI's share: TensorFlow would take the whole GPU."""
    status, findings = run(tmp_path, capsys, kai_pod(annotations))
    finding = only(findings)
    assert status == 1 and finding["rule"] == "share-without-cap"
    assert "KAI Scheduler shares a GPU" in finding["message"] and "gpusharing" in finding["message"]


def test_auto_in_the_container_without_the_share(tmp_path: Path, capsys) -> None:
    """KAI gives the Job's share to train: auto in the sidecar finds none, and says why."""
    job = named("gpu-fraction")
    job["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "MEMORY_LIMIT_MB", "value": "auto"}
    ]
    status, findings = run(tmp_path, capsys, job)
    rules = [(f["container"], f["rule"]) for f in findings]
    assert status == 1 and rules == [
        ("logs", "memory-auto-without-share"),
        ("train", "kai-share-cap"),
    ]
    assert "KAI Scheduler gives this Pod's to container train" in findings[0]["message"]
    assert "gpu-fraction-container-name: logs" in findings[0]["hint"]


def test_without_kai_scheduler_the_annotations_grant_nothing(tmp_path: Path, capsys) -> None:
    pod = named("gpu-memory")
    pod["spec"].pop("schedulerName")
    status, findings = run(tmp_path, capsys, pod)
    assert status == 1 and only(findings)["rule"] == "memory-auto-without-share"


@pytest.mark.parametrize(
    ("annotations", "limits", "why"),
    [
        ({"gpu-fraction": "1"}, {}, "gpu-fraction='1': expected a portion above 0 and below 1"),
        ({"gpu-fraction": "NaN"}, {}, "gpu-fraction='NaN': expected a portion"),
        ({"gpu-memory": "4Gi"}, {}, "gpu-memory='4Gi': expected a whole number of MiB"),
        ({"gpu-memory": 4096}, {}, "gpu-memory: 4096 is not a string: quote it"),
        ({"gpu-memory": "4096", "gpu-fraction": "0.5"}, {}, "both gpu-fraction and gpu-memory"),
        (
            {"gpu-fraction": "0.5"},
            {"nvidia.com/gpu": 1},
            "gpu-fraction with an nvidia.com/gpu limit",
        ),
        ({"gpu-fraction-num-devices": "2"}, {}, "gpu-fraction-num-devices without gpu-fraction"),
        (
            {"gpu-fraction": "0.5", "gpu-fraction-num-devices": "0"},
            {},
            "expected a whole number of GPUs",
        ),
        (
            {"gpu-fraction": "0.5", "gpu-fraction-container-name": "nope"},
            {},
            "no container of that name",
        ),
    ],
)
def test_annotations_the_binder_refuses(
    tmp_path: Path, capsys, annotations: dict, limits: dict, why: str
) -> None:
    pod = kai_pod(annotations, ("MEMORY_LIMIT_MB", "auto"), **limits)
    status, findings = run(tmp_path, capsys, pod)
    finding = only(findings)
    assert status == 1 and finding["rule"] == "kai-annotation-invalid"
    assert finding["message"].startswith("KAI Scheduler's binder refuses this Pod's GPU share: ")
    assert why in finding["message"]


@pytest.mark.parametrize(
    ("template", "container"),
    [
        ({"metadata": {"annotations": {"gpu-fraction": ".5"}}, "spec": {
            "schedulerName": "kai-scheduler", "containers": [{"name": "a"}, {"name": "b"}]}}, "a"),
        ({"metadata": {"annotations": {"gpu-memory": "100", "gpu-fraction-container-name": "i"}},
          "spec": {"schedulerName": "kai-scheduler", "initContainers": [{"name": "i"}],
                   "containers": [{"name": "a"}]}}, "i"),
    ],
)  # fmt: skip
def test_the_share_goes_to_the_first_container_or_the_one_named(
    template: dict, container: str
) -> None:
    share = kai_share(template)
    assert share is not None and share.container == container and share.devices == 1


def test_every_workload_kind_carries_the_share(tmp_path: Path, capsys) -> None:
    """A Deployment's and a JobSet's Pod templates, as well as a Pod's and a Job's."""
    template = {k: v for k, v in named("gpu-memory").items() if k in ("metadata", "spec")}
    template["metadata"] = {"labels": {"app": "kai"}, "annotations": {"gpu-memory": "4096"}}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"app": "kai"}}, "template": template},
    }
    job_template = {**template, "spec": {**template["spec"], "restartPolicy": "Never"}}
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "j"},
        "spec": {"replicatedJobs": [
            {"name": "w", "replicas": 1, "template": {"spec": {"template": job_template}}}
        ]},
    }  # fmt: skip
    status, findings = run(tmp_path, capsys, deployment, jobset)
    assert status == 0
    assert [(f["object"], f["container"], f["rule"]) for f in findings] == [
        ("Deployment/d", "train", "kai-share-cap"),
        ("JobSet/j", "w/train", "kai-share-cap"),
    ]
