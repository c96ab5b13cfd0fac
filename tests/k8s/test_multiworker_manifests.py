"""The multi-worker manifests: the overlay's one literal, and the JobSet and TFJob examples.

JobSet and TFJob are custom resources, which ``kubernetes-validate`` has no schema for. The
examples are checked instead against the fields of the CRDs' Go types (copied below from
kubernetes-sigs/jobset ``api/jobset/v1alpha2/jobset_types.go`` and kubeflow
training-operator ``pkg/apis/kubeflow.org/v1/tensorflow_types.go`` with its common
``ReplicaSpec`` and ``RunPolicy``): an unknown field fails, as the API server's structural
schema pruning would drop it. The Job and Pod templates they embed are built-in types, and
pass ``kubernetes-validate --strict`` on their own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kustomize import (
    K8S,
    KUBERNETES_VERSIONS,
    copy_k8s,
    documents,
    env_of,
    render_text,
    set_literal,
)
from tfboot.manifests import Report, check_paths, check_text

pytestmark = pytest.mark.k8s

EXAMPLES = K8S / "examples"
TEMPLATE = "<built-in template>"
# The fields of the CRD types the examples may use; TEMPLATE marks an embedded built-in.
JOBSET_FIELDS: dict[str, Any] = {
    "apiVersion": None, "kind": None, "metadata": None,
    "spec": {
        "replicatedJobs": [{"name": None, "groupName": None, "replicas": None,
                            "dependsOn": None, "template": TEMPLATE}],
        "network": {"enableDNSHostnames": None, "subdomain": None,
                    "publishNotReadyAddresses": None},
        "successPolicy": {"operator": None, "targetReplicatedJobs": None},
        "failurePolicy": {"maxRestarts": None, "restartStrategy": None, "rules": None},
        "startupPolicy": None, "suspend": None, "coordinator": None, "managedBy": None,
        "ttlSecondsAfterFinished": None, "volumeClaimPolicies": None,
    },
}  # fmt: skip
REPLICA_SPEC = {"replicas": None, "restartPolicy": None, "template": TEMPLATE}
TFJOB_FIELDS: dict[str, Any] = {
    "apiVersion": None, "kind": None, "metadata": None,
    "spec": {
        "runPolicy": {"cleanPodPolicy": None, "ttlSecondsAfterFinished": None,
                      "activeDeadlineSeconds": None, "backoffLimit": None,
                      "schedulingPolicy": None, "suspend": None, "managedBy": None},
        "successPolicy": None, "enableDynamicWorker": None,
        "tfReplicaSpecs": {kind: REPLICA_SPEC for kind in ("Chief", "Worker", "PS", "Evaluator")},
    },
}  # fmt: skip


def unknown_fields(value: Any, fields: Any, path: str = "") -> list[str]:
    """Paths in ``value`` that ``fields`` does not have."""
    if fields is None or fields == TEMPLATE:
        return []
    if isinstance(fields, list):
        return [
            p
            for i, item in enumerate(value)
            for p in unknown_fields(item, fields[0], f"{path}[{i}]")
        ]
    found = [f"{path}.{k}" for k in value if k not in fields]
    return found + [
        p
        for k, v in value.items()
        if k in fields
        for p in unknown_fields(v, fields[k], f"{path}.{k}")
    ]


def load(name: str) -> dict[str, Any]:
    (doc,) = documents((EXAMPLES / name).read_text())
    return doc


@pytest.mark.parametrize("name", ["jobset.yaml", "tfjob.yaml"])
def test_example_passes_tfboot_manifests_clean(name: str) -> None:
    report = check_paths([str(EXAMPLES / name)])
    assert report.findings == [], [f.line() for f in report.findings]
    assert report.containers >= 2


def test_jobset_fields_exist_and_templates_validate() -> None:
    doc = load("jobset.yaml")
    assert doc["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert unknown_fields(doc, JOBSET_FIELDS) == []
    assert doc["spec"]["failurePolicy"]["maxRestarts"] > 0
    for rjob in doc["spec"]["replicatedJobs"]:
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": rjob["name"]},
               "spec": rjob["template"]["spec"]}  # fmt: skip
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(job, version, strict=True)


def test_tfjob_fields_exist_and_templates_validate() -> None:
    doc = load("tfjob.yaml")
    assert doc["apiVersion"] == "kubeflow.org/v1"
    assert unknown_fields(doc, TFJOB_FIELDS) == []
    for kind, spec in doc["spec"]["tfReplicaSpecs"].items():
        assert kind != "Master"
        names = [c["name"] for c in spec["template"]["spec"]["containers"]]
        assert "tensorflow" in names
        template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": kind.lower()},
                    "template": spec["template"]}  # fmt: skip
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(template, version, strict=True)


def test_structural_check_catches_an_unknown_field() -> None:
    doc = load("jobset.yaml")
    doc["spec"]["failurePolicy"]["maxRestart"] = 3
    assert unknown_fields(doc, JOBSET_FIELDS) == [".spec.failurePolicy.maxRestart"]


def test_workers_literal_sets_completions_parallelism_and_tasks(
    kubectl: str, tmp_path: Path
) -> None:
    k8s = copy_k8s(tmp_path)
    overlay = k8s / "overlays" / "multi-worker"
    set_literal(overlay / "workers.env", "WORKERS", "3")
    text = render_text(kubectl, overlay)
    job = next(doc for doc in documents(text) if doc["kind"] == "Job")
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 3
    assert env_of(job["spec"]["template"]["spec"]["containers"][0])["DIST_TASKS"] == "3"
    report = Report()
    check_text("rendered", text, report)
    assert report.findings == []


def test_renamed_job_without_new_hosts_is_caught(kubectl: str, tmp_path: Path) -> None:
    """A namePrefix in a wrapping overlay renames the Job and the Service after the inner
    overlay's replacements ran: the checker names the stale subdomain and DIST_HOSTS."""
    k8s = copy_k8s(tmp_path)
    mine = k8s / "overlays" / "mine"
    mine.mkdir()
    (mine / "kustomization.yaml").write_text(yaml.safe_dump(
        {"resources": ["../multi-worker"], "namePrefix": "team-"}))  # fmt: skip
    report = Report()
    check_text("rendered", render_text(kubectl, mine), report)
    rules = {f.rule: f for f in report.findings}
    assert set(rules) == {"dist-hosts", "dist-subdomain"}, [f.line() for f in report.findings]
    assert "team-tfboot-train-multi-worker-{i}" in rules["dist-hosts"].hint


FRAMEWORK_EXAMPLES = ["jobset.yaml", "jax-jobset.yaml", "pytorch-job.yaml"]


@pytest.mark.parametrize("name", ["jax-jobset.yaml", "pytorch-job.yaml"])
def test_the_pytorch_and_jax_examples_pass_clean_and_validate(name: str) -> None:
    report = check_paths([str(EXAMPLES / name)])
    assert report.findings == [], [f.line() for f in report.findings]
    for doc in documents((EXAMPLES / name).read_text()):
        if doc["kind"] == "JobSet":
            assert unknown_fields(doc, JOBSET_FIELDS) == []
        else:
            kubernetes_validate.validate(doc, KUBERNETES_VERSIONS[-1], strict=True)


@pytest.mark.parametrize("name", FRAMEWORK_EXAMPLES)
def test_a_task_count_the_pods_do_not_match_is_caught_whatever_the_framework(name: str) -> None:
    """TensorFlow's JobSet, JAX's JobSet and PyTorch's Indexed Job: one more task counted
    than the spec runs is the same finding."""
    text = (EXAMPLES / name).read_text()
    wrong = text.replace("value: chief=1,worker=3", "value: chief=1,worker=4")
    wrong = wrong.replace('value: "4"\n', 'value: "5"\n', 1) if wrong == text else wrong
    assert wrong != text
    report = Report()
    check_text(name, wrong, report)
    assert {f.rule for f in report.findings} == {"dist-tasks-count"}, [
        f.line() for f in report.findings
    ]
