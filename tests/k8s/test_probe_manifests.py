"""Regressions for the manifests an outside probe of the release found passing or crashing.

Each case starts from a manifest the project ships (the multi-worker overlay rendered by
kustomize, the JobSet example) and breaks it the way the probe did.
"""

from __future__ import annotations

import copy
import textwrap
from typing import Any

import pytest
import yaml
from kustomize import K8S, documents
from tfboot.manifests import Report, check_text

pytestmark = pytest.mark.k8s

POD = """
apiVersion: v1
kind: Pod
metadata: {name: limits-only}
spec:
  securityContext: {runAsNonRoot: true, runAsUser: 1000, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: train
      image: registry.example.com/train:1.0.0
      resources:
        limits: {cpu: CPU, memory: 4Gi}
      securityContext:
        readOnlyRootFilesystem: true
        allowPrivilegeEscalation: false
        capabilities: {drop: [ALL]}
      volumeMounts: [{name: tmp, mountPath: /tmp}]
  volumes: [{name: tmp, emptyDir: {}}]
"""


def rules(docs: list[dict[str, Any]] | str) -> dict[str, list[str]]:
    report = Report()
    text = docs if isinstance(docs, str) else yaml.safe_dump_all(docs)
    check_text("input", text, report)
    found: dict[str, list[str]] = {}
    for finding in report.findings:
        found.setdefault(finding.rule, []).append(finding.message)
    return found


def overlay(rendered: dict[str, str]) -> list[dict[str, Any]]:
    return documents(rendered["multi-worker"])


def set_env(container: dict[str, Any], name: str, value: str) -> None:
    entries = [e for e in container.setdefault("env", []) if e["name"] != name]
    container["env"] = [*entries, {"name": name, "value": value}]


def job_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    job = next(doc for doc in docs if doc["kind"] == "Job")
    return job["spec"]["template"]["spec"]["containers"][0]


def test_the_overlay_passes(rendered: dict[str, str]) -> None:
    assert rules(overlay(rendered)) == {}


def test_auto_on_an_indexed_job_gets_the_k8s_rules(rendered: dict[str, str]) -> None:
    docs = overlay(rendered)
    container = job_container(docs)
    set_env(container, "DISTRIBUTED", "auto")
    set_env(container, "DIST_TASKS", "7")
    found = rules(docs)
    assert "dist-tasks-count" in found, found
    assert "DIST_TASKS has 7 worker task(s)" in found["dist-tasks-count"][0]


def test_auto_with_wrong_hosts_and_no_service(rendered: dict[str, str]) -> None:
    docs = [d for d in overlay(rendered) if d["kind"] != "Service"]
    container = job_container(docs)
    set_env(container, "DISTRIBUTED", "auto")
    set_env(container, "DIST_HOSTS", "worker=elsewhere-{i}.nowhere")
    found = rules(docs)
    assert {"dist-hosts", "dist-subdomain"} <= set(found), found


def test_k8s_with_a_literal_tf_config(rendered: dict[str, str]) -> None:
    docs = overlay(rendered)
    set_env(job_container(docs), "TF_CONFIG", '{"cluster": {"worker": ["a:1"]}}')
    assert "dist-tf-config" in rules(docs)


def test_a_literal_task_index_on_several_pods(rendered: dict[str, str]) -> None:
    docs = overlay(rendered)
    set_env(job_container(docs), "DIST_TASK_INDEX", "0")
    found = rules(docs)
    assert any("all 4 Pods" in m for m in found.get("dist-task-index", [])), found


def jobset() -> tuple[dict[str, Any], dict[str, Any]]:
    """The JobSet example, its chief's Pod template unshared from the workers'."""
    doc = yaml.safe_load((K8S / "examples" / "jobset.yaml").read_text())
    doc = copy.deepcopy(doc)
    chief = next(r for r in doc["spec"]["replicatedJobs"] if r["name"] == "chief")
    chief["template"] = copy.deepcopy(chief["template"])
    return doc, chief["template"]["spec"]["template"]["spec"]["containers"][0]


def test_the_jobset_example_passes() -> None:
    doc, _ = jobset()
    assert rules([doc]) == {}


def test_a_chief_counting_other_workers_than_run() -> None:
    doc, chief = jobset()
    set_env(chief, "DIST_TASKS", "chief=1,worker=4")
    found = rules([doc])
    assert any("DIST_TASKS has 4 worker task(s), and 3" in m for m in found["dist-tasks-count"])


def test_a_typo_in_another_types_hosts() -> None:
    doc, chief = jobset()
    set_env(chief, "DIST_HOSTS", "chief=train-chief-0-{i}.train;worker=train-wroker-0-{i}.train")
    found = rules([doc])
    assert any("gives worker 0 the name train-wroker-0-0.train" in m for m in found["dist-hosts"])


def test_a_type_no_replicated_job_runs() -> None:
    doc, chief = jobset()
    set_env(chief, "DIST_TASKS", "chief=1,worker=3,ps=1")
    found = rules([doc])
    assert any("no replicatedJob runs ps" in m for m in found["dist-tasks-count"]), found


@pytest.mark.parametrize("cpu", ["1e309", "\u0661", "9" * 30])
def test_a_cpu_quantity_out_of_range_is_a_finding_not_a_crash(cpu: str) -> None:
    found = rules(POD.replace("CPU", f'"{cpu}"'))
    assert "quantity-invalid" in found, found


def test_limits_only_is_complete_because_requests_default_to_limits() -> None:
    assert rules(POD.replace("CPU", '"2"')) == {}


def test_a_pod_without_containers_is_a_finding() -> None:
    found = rules("apiVersion: v1\nkind: Pod\nmetadata: {name: empty}\nspec: {containers: []}\n")
    assert any("no containers" in m for m in found.get("malformed", [])), found


def test_the_readme_limits_only_example_passes() -> None:
    """The README's own container example, in a Pod: limits only, as Kubernetes allows."""
    readme = (K8S.parent / "README.md").read_text()
    block = readme.split("```yaml", 1)[1].split("```", 1)[0]
    pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: readme}\nspec:\n" + textwrap.indent(
        block, "  "
    )
    found = rules(pod)
    assert "resources-missing" not in found, found
