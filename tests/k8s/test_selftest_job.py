"""The node-validation Job (k8s/examples/selftest-job.yaml): strictly valid, clean for tfboot."""

from __future__ import annotations

import kubernetes_validate
import pytest
from kustomize import K8S, KUBERNETES_VERSIONS, containers, documents
from tfboot.manifests import check_paths

pytestmark = pytest.mark.k8s

SELFTEST_JOB = K8S / "examples" / "selftest-job.yaml"


def test_selftest_job_validates_and_is_clean() -> None:
    path = SELFTEST_JOB
    for doc in documents(path.read_text()):
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)
    report = check_paths([str(path)])
    assert report.findings == [], "\n".join(f.line() for f in report.findings)


def test_selftest_job_runs_selftest_on_gpus_without_retries() -> None:
    (doc,) = documents(SELFTEST_JOB.read_text())
    assert doc["spec"]["backoffLimit"] == 0
    ((_, container),) = containers([doc])
    assert container["command"][-2:] == ["tfboot", "selftest"]
    assert int(container["resources"]["limits"]["nvidia.com/gpu"]) >= 2
