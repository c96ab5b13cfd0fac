"""``tfboot manifests``: each broken manifest gives its rule; inputs, output and exit status.

``testdata/broken/<rule>.yaml`` is a hardened workload with exactly one defect, so the
checker must report that rule and no other. The kinds vary across the files, to cover
every workload kind the checker reads.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from kustomize import K8S, OVERLAYS
from tfboot.manifests import RULES, Report, check_paths, check_text, main, quantity

pytestmark = pytest.mark.k8s

BROKEN = Path(__file__).resolve().parent / "testdata" / "broken"
BROKEN_FILES = sorted(BROKEN.glob("*.yaml"))
GOOD_POD = """
apiVersion: v1
kind: Pod
metadata: {name: good}
spec:
  securityContext: {runAsNonRoot: true, runAsUser: 1000, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: train
      image: registry.example.com/train:1.0.0
      env: [{name: VIRTUAL_SPLIT, value: "2"}]
      resources:
        requests: {cpu: "1", memory: 1Gi}
        limits: {cpu: "1", memory: 1Gi}
      securityContext:
        readOnlyRootFilesystem: true
        allowPrivilegeEscalation: false
        capabilities: {drop: [ALL]}
      volumeMounts: [{name: tmp, mountPath: /tmp}]
  volumes: [{name: tmp, emptyDir: {}}]
"""


def findings(text: str) -> Report:
    report = Report()
    check_text("input", text, report)
    return report


def test_every_rule_has_a_broken_manifest() -> None:
    assert {path.stem for path in BROKEN_FILES} == set(RULES)


@pytest.mark.parametrize("path", BROKEN_FILES, ids=lambda p: p.stem)
def test_broken_manifest_gives_exactly_its_rule(path: Path) -> None:
    report = check_paths([str(path)])
    assert {f.rule for f in report.findings} == {path.stem}, [f.line() for f in report.findings]
    finding = report.findings[0]
    assert finding.severity == RULES[path.stem][0]
    assert finding.message and finding.file == str(path)
    # Findings on a whole input or object, not on a container
    if path.stem not in ("unreadable", "no-workloads", "duplicate-key", "not-checked"):
        # JobSet and TFJob containers are named after their group: worker/train, Chief/tensorflow
        assert finding.container.rpartition("/")[2] in ("train", "tensorflow")
        assert finding.object.endswith(f"/{path.stem}")
        assert finding.hint, "every finding on a container says how to fix it"


@pytest.mark.parametrize("path", BROKEN_FILES, ids=lambda p: p.stem)
def test_exit_status_follows_severity(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    severity = RULES[path.stem][0]
    assert main([str(path)]) == (1 if severity == "error" else 0)
    assert main(["--strict", str(path)]) == (0 if severity == "note" else 1)  # a note never fails
    out = capsys.readouterr().out
    assert f" {path.stem}: " in out


def test_clean_pod_and_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "good.yaml"
    path.write_text(GOOD_POD)
    assert main(["--json", "--strict", str(path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == {
        "findings": [],
        "summary": {"errors": 0, "warnings": 0, "objects": 1, "containers": 1},
    }


def test_json_finding_fields(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--json", str(BROKEN / "gpu-memory-over-share.yaml")]) == 1
    (finding,) = json.loads(capsys.readouterr().out)["findings"]
    assert finding["rule"] == "gpu-memory-over-share"
    assert finding["object"] == "StatefulSet/gpu-memory-over-share"
    assert finding["container"] == "train"
    assert finding["severity"] == "error"
    assert "6144" in finding["message"] and "4096" in finding["message"]
    assert finding["hint"]


def test_multi_document_stdin(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    stream = "\n---\n".join(path.read_text() for path in BROKEN_FILES if path.stem != "unreadable")
    monkeypatch.setattr(sys, "stdin", io.StringIO(stream))
    assert main(["--json", "-"]) == 1
    data = json.loads(capsys.readouterr().out)
    expected = set(RULES) - {"unreadable", "no-workloads"}
    assert {f["rule"] for f in data["findings"]} == expected
    assert data["summary"]["objects"] == len(expected)


def test_json_input_and_list_kind_need_no_yaml() -> None:
    """kubectl's -o json output (a List) is read without PyYAML, in a fresh interpreter."""
    doc = {"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
         "spec": {"containers": [{"name": "c", "image": "x:1", "env": [
             {"name": "MEMORY_LIMIT_MB", "value": "-1"}]}]}}]}  # fmt: skip
    code = (
        "import sys; sys.modules['yaml'] = None\n"
        "from tfboot.manifests import main\n"
        "raise SystemExit(main(sys.argv[1:]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "-"], input=json.dumps(doc), capture_output=True, text=True
    )
    assert proc.returncode == 1, proc.stderr
    assert "config-invalid: MEMORY_LIMIT_MB='-1'" in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-c", code, "-"], input=GOOD_POD, capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "PyYAML" in proc.stderr and "tfboot[manifests]" in proc.stderr


def test_unreadable_path_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_configmap_refs_in_the_same_stream_are_resolved() -> None:
    stream = GOOD_POD.replace(
        'env: [{name: VIRTUAL_SPLIT, value: "2"}]',
        "env: [{name: CPU_THREADS, valueFrom: {configMapKeyRef: {name: cfg, key: threads}}}]\n"
        "      envFrom: [{configMapRef: {name: cfg}, prefix: ''}]",
    )
    stream += "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\n"
    report = findings(stream + 'data: {threads: "8", MIXED_PRECISION: fp8}\n')
    assert {f.rule for f in report.findings} == {"cpu-threads-over-limit", "config-invalid"}


def test_downward_cpu_rounds_up_like_the_kubelet() -> None:
    """limits.cpu 1500m with divisor 1 is 2: CPU_THREADS=2 fits; divisor 1m is 1500: too many."""
    base = GOOD_POD.replace('cpu: "1", memory: 1Gi}', 'cpu: "1500m", memory: 1Gi}')
    ref = (
        "env: [{name: CPU_THREADS, valueFrom: {resourceFieldRef: "
        "{resource: limits.cpu, divisor: %s}}}]"
    )
    ok = base.replace('env: [{name: VIRTUAL_SPLIT, value: "2"}]', ref % '"1"')
    assert findings(ok).findings == []
    bad = findings(base.replace('env: [{name: VIRTUAL_SPLIT, value: "2"}]', ref % "1m"))
    assert [f.rule for f in bad.findings] == ["cpu-threads-downward"]
    assert "1500 millicores" in bad.findings[0].message


@pytest.mark.parametrize(
    ("text", "value"),
    [("2", "2"), ("1500m", "1.5"), ("16Gi", str(16 * 2**30)), ("1e3", "1000"), ("0.5", "0.5"),
     ("2k", "2000"), ("100M", "100000000")],
)  # fmt: skip
def test_quantity(text: str, value: str) -> None:
    assert quantity(text) == Decimal(value)


@pytest.mark.parametrize("text", ["abc", "2 cores", "1.5.2", "", "Gi", "5gb"])
def test_quantity_rejects(text: str) -> None:
    assert quantity(text) is None


def test_cli_subcommand_reads_a_kustomize_pipe(kubectl: str) -> None:
    """The documented CI check, end to end: kubectl kustomize ... | python -m tfboot manifests -"""
    for overlay in OVERLAYS:
        rendered = subprocess.run(
            [kubectl, "kustomize", str(K8S / "overlays" / overlay)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        proc = subprocess.run(
            [sys.executable, "-m", "tfboot", "manifests", "--strict", "--json", "-"],
            input=rendered.stdout, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert json.loads(proc.stdout)["summary"]["errors"] == 0
    proc = subprocess.run(
        [sys.executable, "-m", "tfboot", "manifests", str(BROKEN / "privileged.yaml")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "error privileged:" in proc.stdout


def test_a_split_given_as_sizes_counts_its_logical_gpus_as_replicas() -> None:
    """DIST_REPLICAS_PER_WORKER against nvidia.com/gpu x VIRTUAL_SPLIT, where the split is
    given as sizes: two sizes are two logical GPUs (``settings.split_count``)."""
    text = (BROKEN / "dist-replicas.yaml").read_text()
    text = text.replace(
        'limits: {cpu: "2", memory: 4Gi}', 'limits: {cpu: "2", memory: 4Gi, nvidia.com/gpu: 1}'
    )
    split = ('- {name: VIRTUAL_SPLIT, value: "1024,1024"}\n'
             '            - {name: MEMORY_LIMIT_MB, value: "4096"}\n'
             "            - {name: DIST_REPLICAS_PER_WORKER")  # fmt: skip
    text = text.replace("- {name: DIST_REPLICAS_PER_WORKER", split)
    assert "dist-replicas" not in {f.rule for f in findings(text).findings}
    three = text.replace(
        'DIST_REPLICAS_PER_WORKER, value: "2"', 'DIST_REPLICAS_PER_WORKER, value: "3"'
    )
    said = [f.message for f in findings(three).findings if f.rule == "dist-replicas"]
    assert len(said) == 1 and "1 GPU(s) x VIRTUAL_SPLIT=1024,1024 (2 logical GPUs)" in said[0]
