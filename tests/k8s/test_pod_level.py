"""Pod-level resources (KEP-2837): a container without its own limits gets the Pod's
``spec.resources``, shared with the Pod's other containers. ``tfboot manifests`` reads them
for every check that reads limits and notes a training container that shares them;
``tfboot inject`` gives such a container the Downward API's ``limits.memory``
(``TFBOOT_POD_MEMORY_LIMIT_MB``), and ``uninject`` takes it out byte for byte."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from tfboot.manifests import check_paths

SHARED = Path(__file__).parent / "testdata" / "broken" / "pod-level-shared.yaml"
IMAGE = "registry.example.com/tfboot-inject:1.0.0"


def tfboot(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfboot", *args], input=stdin, text=True,
                          capture_output=True, timeout=120)  # fmt: skip


def findings(text: str, tmp_path: Path) -> dict[str, list[str]]:
    path = tmp_path / "pod.yaml"
    path.write_text(text)
    found: dict[str, list[str]] = {}
    for finding in check_paths([str(path)]).findings:
        found.setdefault(finding.rule, []).append(f"{finding.container}: {finding.message}")
    return found


def test_the_pod_s_limits_stand_for_a_container_without_its_own(tmp_path: Path) -> None:
    """No resources-missing; HOST_MEMORY_LIMIT_MB and CPU_THREADS judged against the Pod's;
    the note names the container that shares it, not the sidecar."""
    source = SHARED.read_text()
    found = findings(source, tmp_path)
    assert list(found) == ["pod-level-shared"]
    assert found["pod-level-shared"] == [
        "train: limits.memory is the Pod's (8Gi, spec.resources), shared with logs: tfboot "
        "sizes tf.data's buffers and keeps freed memory against all of it, and does not see "
        "what the others use"
    ]
    over = source.replace(
        "      volumeMounts: [{name: tmp, mountPath: /tmp}]\n    - name: logs",
        '      env: [{name: HOST_MEMORY_LIMIT_MB, value: "9000"}, '
        '{name: CPU_THREADS, value: "8"}]\n'
        "      volumeMounts: [{name: tmp, mountPath: /tmp}]\n    - name: logs",
    )
    assert over != source
    judged = findings(over, tmp_path)
    assert "9000 is more than the 8192 MiB of limits.memory" in judged["host-memory-over-limit"][0]
    assert "more than the 4 CPU(s) of limits.cpu" in judged["cpu-threads-over-limit"][0]
    alone = source[: source.index("    - name: logs")] + "  volumes: [{name: tmp, emptyDir: {}}]\n"
    assert findings(alone, tmp_path) == {}  # no other container: nothing shared


def test_a_container_limit_of_its_own_is_not_the_pod_s(tmp_path: Path) -> None:
    source = SHARED.read_text().replace(
        "      image: registry.example.com/team/pytorch-train:1.0.0\n",
        "      image: registry.example.com/team/pytorch-train:1.0.0\n"
        '      resources: {limits: {cpu: "2", memory: 6Gi}}\n',
    )
    assert "pod-level-shared" not in findings(source, tmp_path)


def test_inject_gives_the_downward_api_s_limit_and_uninject_takes_it_out() -> None:
    source = SHARED.read_text()
    done = tfboot("inject", "--image", IMAGE, "-", stdin=source)
    assert done.returncode == 0, done.stderr
    assert "container train: its memory limit is the Pod's (spec.resources), shared with its " \
        "other containers: TFBOOT_POD_MEMORY_LIMIT_MB from the Downward API's limits.memory " \
        "says so to tfboot" in done.stderr  # fmt: skip
    train = yaml.safe_load(done.stdout)["spec"]["containers"][0]
    assert {"name": "TFBOOT_POD_MEMORY_LIMIT_MB", "valueFrom": {"resourceFieldRef": {
        "resource": "limits.memory", "divisor": "1Mi"}}} in train["env"]  # fmt: skip
    checked = tfboot("manifests", "--json", "-", stdin=done.stdout)
    assert "config-invalid" not in checked.stdout and "resource-field" not in checked.stdout
    again = tfboot("inject", "--image", IMAGE, "-", stdin=done.stdout)
    assert again.stdout == done.stdout
    undone = tfboot("uninject", "-", stdin=done.stdout)
    assert undone.returncode == 0 and undone.stdout == source, undone.stderr


def test_resources_of_another_shape_are_no_crash_of_inject() -> None:
    """A Pod's or a container's ``resources`` that is no mapping: inject adds nothing for
    it, with or without ``--shm``, and raises nothing."""
    source = SHARED.read_text().replace(
        '  resources:\n    requests: {cpu: "4", memory: 8Gi}\n'
        '    limits: {cpu: "4", memory: 8Gi}\n',
        "  resources: 8Gi\n",
    )
    assert "resources: 8Gi" in source
    for args in ((), ("--shm",)):
        done = tfboot("inject", "--image", IMAGE, *args, "-", stdin=source)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        assert "TFBOOT_POD_MEMORY_LIMIT_MB" not in done.stdout
