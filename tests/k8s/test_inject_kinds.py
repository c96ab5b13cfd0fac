"""``tfboot inject`` on every workload kind that holds a Pod template (issue 36): the common
CRDs are injected (the hook first on ``PYTHONPATH`` in every container of every template,
``uninject`` giving back the input byte for byte) or named as skipped with the reason on
stderr, exit 0, never silently; ``tfboot manifests`` checks the templates inject reaches.

The manifests are in ``testdata/kinds``, one file a family, written from each CRD's API
types (the versions are in each file's first comment).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

KINDS = Path(__file__).resolve().parent / "testdata" / "kinds"
IMAGE = "registry.example/tfboot-inject:0.1.0"
ADVICE = 'label its Pods tfboot.dev/inject: "true" for an admission policy'

# Injected whole: each file's objects, with the groups of the Pod templates inject reaches.
INJECTED: dict[str, dict[str, list[str]]] = {
    "inferenceservice.yaml": {"InferenceService/llm": ["predictor", "transformer"]},
    "leaderworkerset.yaml": {
        "LeaderWorkerSet/vllm": [
            "leaderWorkerTemplate.leaderTemplate",
            "leaderWorkerTemplate.workerTemplate",
        ]
    },
    "kubeflow.yaml": {
        "PyTorchJob/bert": ["pytorchReplicaSpecs.Master", "pytorchReplicaSpecs.Worker"],
        "TFJob/mnist": ["Worker"],
        "MPIJob/horovod": ["mpiReplicaSpecs.Launcher", "mpiReplicaSpecs.Worker"],
    },
    "jobset.yaml": {"JobSet/pretrain": ["driver", "workers"]},
    "ray.yaml": {
        "RayCluster/tune": ["headGroupSpec", "workerGroupSpecs[gpu]"],
        "RayJob/batch": [
            "rayClusterSpec.headGroupSpec",
            "rayClusterSpec.workerGroupSpecs[small]",
            "submitterPodTemplate",
        ],
        "RayService/serve": ["rayClusterConfig.headGroupSpec"],
    },
    "knative-volcano.yaml": {"Service/predict": ["spec"], "Job/vc-train": ["tasks[worker]"]},
}
# Left as they are: each file's notes, as ``object: part of the reason``.
SKIPPED: dict[str, list[str]] = {
    "argo.yaml": [
        "Workflow/train-: Argo runs templates prep (script), fit (container), pair "
        "(containerSet) in Pods it builds itself",
        "CronWorkflow/nightly: Argo runs templates fit (container)",
        "WorkflowTemplate/evaluate: Argo runs templates evaluate (container)",
    ],
    "inferenceservice-model.yaml": [
        "InferenceService/llama: spec.predictor.model: KServe builds this model server's "
        "container from a ServingRuntime: not injected",
        "InferenceService/llama: spec.predictor.workerSpec: KServe's multi-node workers take "
        "no annotations",
    ],
    "servingruntime.yaml": [
        "ServingRuntime/kserve-sklearnserver: KServe merges a ServingRuntime into the Pods of "
        "each InferenceService that uses it, and its Pod spec takes no initContainers",
    ],
    "seldon.yaml": [
        "SeldonDeployment/iris: containers at spec.predictors[default].componentSpecs[0].spec."
        "containers are in no Pod template tfboot inject knows",
    ],
}


def tfboot(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfboot", *args], input=stdin, text=True,
                          capture_output=True, timeout=120)  # fmt: skip


def name_of(doc: dict[str, Any]) -> str:
    metadata = doc.get("metadata") or {}
    return f"{doc['kind']}/{metadata.get('name') or metadata.get('generateName')}"


def groups(text: str) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Each object's ``(group, pod spec)`` pairs, by ``kind/name``."""
    from tfboot.kube.workloads import pod_templates

    return {name_of(d): list(pod_templates(d)) for d in yaml.safe_load_all(text) if d}


def notes(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ": note: " in line]


def assert_injected(pod: dict[str, Any], where: str) -> None:
    """The tree's volume, and the hook first on PYTHONPATH in every container."""
    assert "tfboot" in [v["name"] for v in pod["volumes"]], where
    for container in pod["containers"]:
        value = {e["name"]: e.get("value") for e in container["env"]}["PYTHONPATH"]
        assert value.split(":")[0] == "/tfboot/hook", (where, container["name"])
        assert {"name": "tfboot", "mountPath": "/tfboot", "readOnly": True} in container[
            "volumeMounts"
        ], where


@pytest.mark.parametrize("file", sorted(INJECTED))
def test_each_kind_is_injected_and_given_back(file: str) -> None:
    text = (KINDS / file).read_text()
    done = tfboot("inject", "--image", IMAGE, str(KINDS / file))
    assert done.returncode == 0, done.stderr
    assert notes(done.stderr) == []
    found = groups(done.stdout)
    assert {obj: [g for g, _ in pods] for obj, pods in found.items()} == INJECTED[file]
    for obj, pods in found.items():
        for group, pod in pods:
            assert_injected(pod, f"{obj} {group}")
    assert tfboot("uninject", "-", stdin=done.stdout).stdout == text
    assert tfboot("inject", "--image", IMAGE, "-", stdin=done.stdout).stdout == done.stdout


def test_a_kserve_component_keeps_its_record_in_its_own_annotations() -> None:
    """KServe gives a component's ``annotations`` to its Pods: inject's record goes there, the
    PYTHONPATH the server sets keeps its entries after the hook, and nothing lands in a
    ``metadata`` KServe's API does not have."""
    done = tfboot("inject", "--image", IMAGE, str(KINDS / "inferenceservice.yaml"))
    (isvc,) = yaml.safe_load_all(done.stdout)
    predictor, transformer = isvc["spec"]["predictor"], isvc["spec"]["transformer"]
    assert "metadata" not in predictor and "metadata" not in transformer
    assert predictor["annotations"]["prometheus.io/scrape"] == "true"
    assert json.loads(predictor["annotations"]["tfboot/injected"])["containers"] == [
        "kserve-container"
    ]
    assert "tfboot/injected" in transformer["annotations"]
    env = {e["name"]: e["value"] for e in predictor["containers"][0]["env"]}
    assert env["PYTHONPATH"] == "/tfboot/hook:/srv/lib"
    assert [c["name"] for c in predictor["initContainers"]] == ["tfboot-inject"]
    assert [c["name"] for c in transformer["initContainers"]] == [
        "tfboot-inject",
        "tfboot-env-kserve-container",
    ]


@pytest.mark.parametrize("file", sorted(SKIPPED))
def test_each_kind_inject_cannot_change_is_named_with_the_reason(file: str) -> None:
    text = (KINDS / file).read_text()
    done = tfboot("inject", "--image", IMAGE, str(KINDS / file))
    assert done.returncode == 0, done.stderr
    assert done.stdout == text
    said = notes(done.stderr)
    assert len(said) == len(SKIPPED[file]), said
    for line, expected in zip(said, SKIPPED[file], strict=True):
        assert line.startswith(f"tfboot inject: note: {KINDS / file}: {expected}"), line
        assert line.endswith(f"{ADVICE} (docs/inject.md, Workload kinds)"), line


def test_a_kserve_framework_predictor_has_its_sidecar_injected_and_its_server_named() -> None:
    file = KINDS / "inferenceservice-sidecar.yaml"
    done = tfboot("inject", "--image", IMAGE, str(file))
    assert done.returncode == 0, done.stderr
    (pods,) = groups(done.stdout).values()
    assert [g for g, _ in pods] == ["predictor"]
    assert_injected(pods[0][1], "predictor")
    (note,) = notes(done.stderr)
    assert "InferenceService/sklearn-iris: spec.predictor.sklearn: KServe builds" in note
    assert tfboot("uninject", "-", stdin=done.stdout).stdout == file.read_text()


def test_a_trainjob_is_named_and_its_runtime_injected() -> None:
    file = KINDS / "trainer.yaml"
    done = tfboot("inject", "--image", IMAGE, str(file))
    assert done.returncode == 0, done.stderr
    (note,) = notes(done.stderr)
    assert "TrainJob/finetune: Kubeflow Trainer builds its Pods from the runtime it names" in note
    found = groups(done.stdout)
    assert found["TrainJob/finetune"] == []
    ((group, pod),) = found["ClusterTrainingRuntime/torch-distributed"]
    assert group == "spec.replicatedJobs[node].spec"
    assert_injected(pod, group)
    assert tfboot("uninject", "-", stdin=done.stdout).stdout == file.read_text()


def test_an_injected_kind_in_a_list_and_a_skipped_one_in_one_stream() -> None:
    """Notes come with the output of the objects inject changed, never instead of it."""
    text = "---\n".join((KINDS / f).read_text() for f in ("leaderworkerset.yaml", "argo.yaml"))
    done = tfboot("inject", "--image", IMAGE, "-", stdin=text)
    assert done.returncode == 0, done.stderr
    assert len(notes(done.stderr)) == 3
    assert "/tfboot/hook" in done.stdout
    assert tfboot("uninject", "-", stdin=done.stdout).stdout == text


def test_the_checker_counts_the_kinds_inject_reaches() -> None:
    for file, objects in INJECTED.items():
        done = tfboot("manifests", "--json", str(KINDS / file))
        summary = json.loads(done.stdout)["summary"]
        assert summary["objects"] == len(objects), file
        found = groups((KINDS / file).read_text()).values()
        containers = sum(len(pod["containers"]) for pods in found for _, pod in pods)
        assert summary["containers"] == containers, file


def test_a_crd_named_like_a_built_in_kind_is_searched() -> None:
    """Volcano's ``Job`` is not batch/v1's: its Pod templates are looked for, not its
    ``spec.template``."""
    from tfboot.kube.workloads import templates

    pod = {"spec": {"containers": [{"name": "worker", "image": "registry.example/train:4"}]}}
    volcano = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
               "spec": {"tasks": [{"name": "worker", "template": pod}]}}  # fmt: skip
    assert list(templates(volcano)) == [("tasks[worker]", pod)]
    batch = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": pod}}
    assert list(templates(batch)) == [("", pod)]
    assert list(templates({**batch, "apiVersion": None})) == [("", pod)]


def test_the_checker_names_what_it_cannot_read() -> None:
    """An input of Argo workflows only: a note per object, not "no workloads"."""
    done = subprocess.run([sys.executable, "-m", "tfboot", "manifests", str(KINDS / "argo.yaml")],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout
    assert "note not-checked: Argo runs templates" in done.stdout
    assert "no-workloads" not in done.stdout
