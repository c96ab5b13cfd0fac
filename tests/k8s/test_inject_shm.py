"""``tfboot inject --shm``: each container that gets the runtime's 64 MiB /dev/shm, and whose
limits.memory allows more, gets a memory-backed one of its own, a quarter of that limit; the
output says what was written and why a container got none; ``tfboot manifests`` has nothing
to say about /dev/shm on the result; ``uninject`` gives back the input byte for byte.

And ``tfboot manifests`` reads every /dev/shm a Pod can have as what it is (``kube.shm``):
the runtime's, a memory ``emptyDir`` with or without ``sizeLimit``, the node's (a
``hostPath``, or ``hostIPC``), or one not in memory (an ``emptyDir`` on disk, a PVC);
``loader-shm`` and ``nccl-shm`` only where the runtime's 64 MiB is what the container gets.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from tfboot.kube.shm import MEMORY, NODE, OTHER, RUNTIME, dev_shm
from tfboot.manifests import Report, check_text

BROKEN = Path(__file__).parent / "testdata" / "broken"
IMAGE = "registry.example.com/tfboot-inject:1.0.0"
SHM_RULES = {"nccl-shm", "loader-shm", "shm-size-limit", "shm-over-limit", "shm-host",
             "shm-not-memory"}  # fmt: skip

# A PyTorch trainer on 2 GPUs with 8Gi beside a helper of 64Mi, as a team writes them.
TRAINER_AND_HELPER = """\
# the team's trainer, with its metrics helper
apiVersion: batch/v1
kind: Job
metadata:
  name: train
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      securityContext: {runAsNonRoot: true, runAsUser: 1000, seccompProfile: {type: RuntimeDefault}}
      containers:
        - name: train   # the GPU trainer
          image: registry.example.com/team/pytorch-train:1.0.0
          resources:
            requests: {cpu: "4", memory: 8Gi}
            limits: {cpu: "4", memory: 8Gi, nvidia.com/gpu: 2}
          securityContext:
            readOnlyRootFilesystem: true
            allowPrivilegeEscalation: false
            capabilities: {drop: [ALL]}
          volumeMounts: [{name: tmp, mountPath: /tmp}]
        - name: helper
          image: registry.example.com/team/metrics:1.0.0
          resources:
            requests: {cpu: 100m, memory: 64Mi}
            limits: {cpu: 100m, memory: 64Mi}
          securityContext:
            readOnlyRootFilesystem: true
            allowPrivilegeEscalation: false
            capabilities: {drop: [ALL]}
      volumes: [{name: tmp, emptyDir: {}}]
"""


def tfboot(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfboot", *args], input=stdin, text=True,
                          capture_output=True, timeout=120)  # fmt: skip


def shm_rules(text: str) -> list[tuple[str, str]]:
    """(container, rule) of each /dev/shm finding ``tfboot manifests`` gives on ``text``."""
    found = json.loads(tfboot("manifests", "--json", "-", stdin=text).stdout)["findings"]
    return [(f["container"], f["rule"]) for f in found if f["rule"] in SHM_RULES]


def findings(text: str) -> dict[str, Any]:
    """The checker's findings on ``text``, in-process: rule -> the finding."""
    report = Report()
    check_text("input", text, report)
    return {f.rule: f for f in report.findings}


def pod_spec(out: str) -> dict[str, Any]:
    doc = yaml.safe_load(out)
    return doc["spec"]["template"]["spec"] if doc["kind"] != "Pod" else doc["spec"]


def at_shm(container: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in container.get("volumeMounts") or [] if m["mountPath"] == "/dev/shm"]


def volumes(pod: dict[str, Any]) -> dict[str, Any]:
    return {v["name"]: v for v in pod.get("volumes") or []}


def inject_shm(source: str) -> subprocess.CompletedProcess[str]:
    done = tfboot("inject", "--image", IMAGE, "--shm", "-", stdin=source)
    assert done.returncode == 0, done.stderr
    return done


def assert_round_trip(source: str, out: str) -> None:
    """Injecting again changes nothing; uninject gives back ``source`` byte for byte."""
    assert inject_shm(out).stdout == out, "inject twice is not inject once"
    undone = tfboot("uninject", "-", stdin=out)
    assert undone.returncode == 0 and undone.stdout == source, undone.stderr


def test_shm_is_added_sized_from_the_limit_and_taken_out_again() -> None:
    source = (BROKEN / "loader-shm.yaml").read_text()  # limits.memory 4Gi, a PyTorch image
    assert shm_rules(source) == [("train", "loader-shm")]
    done = inject_shm(source)
    assert "Pod/loader-shm container train: added an emptyDir with medium: Memory and " \
        "sizeLimit: 1024Mi at /dev/shm, its own (volume tfboot-shm-train): a quarter of its " \
        "limits.memory (4Gi), which its pages count against (--shm; uninject takes it out)" \
        in done.stderr, done.stderr  # fmt: skip
    pod = pod_spec(done.stdout)
    assert volumes(pod)["tfboot-shm-train"]["emptyDir"] == {"medium": "Memory",
                                                            "sizeLimit": "1024Mi"}  # fmt: skip
    assert at_shm(pod["containers"][0]) == [{"name": "tfboot-shm-train", "mountPath": "/dev/shm"}]
    checked = tfboot("manifests", "--json", "--strict", "-", stdin=done.stdout)
    assert checked.returncode == 0 and "shm" not in checked.stdout, checked.stdout
    assert_round_trip(source, done.stdout)


def test_a_trainer_and_a_small_helper_each_get_what_their_own_limit_allows() -> None:
    """The trainer (8Gi) gets 2048Mi of its own; the helper (64Mi), whose quarter is no more
    than the runtime's 64 MiB, gets none and keeps the runtime's, said so; no finding on
    /dev/shm is left, and the helper has no shm-over-limit."""
    source = TRAINER_AND_HELPER
    assert shm_rules(source) == [("train", "nccl-shm")]
    done = inject_shm(source)
    pod = pod_spec(done.stdout)
    train, helper = pod["containers"]
    assert at_shm(train) == [{"name": "tfboot-shm-train", "mountPath": "/dev/shm"}]
    assert at_shm(helper) == []
    shm = {n: v for n, v in volumes(pod).items() if n.startswith("tfboot-shm")}
    assert shm == {"tfboot-shm-train": {"name": "tfboot-shm-train", "emptyDir": {
        "medium": "Memory", "sizeLimit": "2048Mi"}}}  # fmt: skip
    notes = [line for line in done.stderr.splitlines() if "/dev/shm" in line]
    assert notes == [
        "tfboot inject: note: <stdin>: Job/train container train: added an emptyDir with "
        "medium: Memory and sizeLimit: 2048Mi at /dev/shm, its own (volume tfboot-shm-train): "
        "a quarter of its limits.memory (8Gi), which its pages count against (--shm; "
        "uninject takes it out)",
        "tfboot inject: note: <stdin>: Job/train container helper: /dev/shm not added: a "
        "quarter of its limits.memory (64Mi) is not more than the runtime's 64 MiB, which it "
        "keeps (--shm)",
    ]
    assert shm_rules(done.stdout) == []
    assert_round_trip(source, done.stdout)


def test_containers_of_different_limits_get_their_own_sizes_and_a_sleep_sidecar_none() -> None:
    """Two app containers of 8Gi and 600Mi get 2048Mi and 128Mi (rounded down to 64 MiB, said),
    each its own volume; a ``sleep`` sidecar of 64Mi gets none."""
    doc = yaml.safe_load((BROKEN / "loader-shm.yaml").read_text())
    first = doc["spec"]["containers"][0]
    first["resources"]["limits"]["memory"] = first["resources"]["requests"]["memory"] = "8Gi"
    second = {**copy.deepcopy(first), "name": "eval",
              "resources": {"limits": {"cpu": "1", "memory": "600Mi"}}}  # fmt: skip
    sidecar = {"name": "sidecar", "image": "registry.example.com/busybox:1.37",
               "command": ["sleep", "infinity"],
               "resources": {"limits": {"cpu": "10m", "memory": "64Mi"}}}  # fmt: skip
    doc["spec"]["containers"] += [second, sidecar]
    source = "# three containers\n" + yaml.safe_dump(doc, sort_keys=False)
    done = inject_shm(source)
    pod = pod_spec(done.stdout)
    sizes = {c["name"]: volumes(pod)[at_shm(c)[0]["name"]]["emptyDir"]["sizeLimit"]
             for c in pod["containers"] if at_shm(c)}  # fmt: skip
    assert sizes == {"train": "2048Mi", "eval": "128Mi"}
    assert {at_shm(c)[0]["name"] for c in pod["containers"] if at_shm(c)} == {
        "tfboot-shm-train", "tfboot-shm-eval"}  # fmt: skip
    assert "container eval: added an emptyDir with medium: Memory and sizeLimit: 128Mi at " \
        "/dev/shm, its own (volume tfboot-shm-eval): a quarter of its limits.memory (600Mi), " \
        "rounded down to whole 64 MiB," in done.stderr  # fmt: skip
    assert "container sidecar: /dev/shm not added: a quarter of its limits.memory (64Mi) is " \
        "not more than the runtime's 64 MiB, which it keeps (--shm)" in done.stderr  # fmt: skip
    assert shm_rules(done.stdout) == []
    assert_round_trip(source, done.stdout)


def test_without_the_option_or_a_limit_nothing_is_added() -> None:
    source = (BROKEN / "loader-shm.yaml").read_text()
    plain = pod_spec(tfboot("inject", "--image", IMAGE, "-", stdin=source).stdout)
    assert not any(n.startswith("tfboot-shm") for n in volumes(plain))
    unlimited = source.replace("memory: 4Gi, nvidia.com/gpu: 1", "nvidia.com/gpu: 1")
    assert unlimited != source
    done = inject_shm(unlimited)
    assert "Pod/loader-shm container train: /dev/shm not added: its size is taken from " \
        "limits.memory, and it has no limits.memory; it keeps the runtime's 64 MiB (--shm)" \
        in done.stderr  # fmt: skip
    invalid = inject_shm(source.replace("memory: 4Gi, nvidia.com/gpu: 1",
                                        "memory: lots, nvidia.com/gpu: 1"))  # fmt: skip
    assert "it has limits.memory 'lots', not a size;" in invalid.stderr, invalid.stderr
    assert not any(n.startswith("tfboot-shm") for n in volumes(pod_spec(done.stdout)))


def test_a_container_with_its_own_dev_shm_keeps_it() -> None:
    source = (BROKEN / "shm-over-limit.yaml").read_text()  # its own 8Gi emptyDir at /dev/shm
    done = inject_shm(source)
    assert "/dev/shm" not in done.stderr, done.stderr
    pod = pod_spec(done.stdout)
    assert at_shm(pod["containers"][0]) == [{"name": "shm", "mountPath": "/dev/shm"}]
    host = (BROKEN / "shm-host.yaml").read_text()  # the node's /dev/shm, a hostPath
    done = inject_shm(host)
    assert at_shm(pod_spec(done.stdout)["containers"][0]) == [
        {"name": "shm", "mountPath": "/dev/shm"}]  # fmt: skip


def test_a_pod_with_host_ipc_gets_none() -> None:
    """Under hostIPC the runtime mounts the node's /dev/shm: inject leaves it, and says so."""
    doc = yaml.safe_load((BROKEN / "loader-shm.yaml").read_text())
    doc["spec"]["hostIPC"] = True
    source = yaml.safe_dump(doc, sort_keys=False)
    done = inject_shm(source)
    assert "Pod/loader-shm: /dev/shm not added: the Pod has hostIPC: true, so its containers " \
        "have the node's /dev/shm (--shm)" in done.stderr, done.stderr  # fmt: skip
    assert not any(n.startswith("tfboot-shm") for n in volumes(pod_spec(done.stdout)))
    assert shm_rules(done.stdout) == [("train", "shm-host")]


def test_a_changed_limit_is_injected_again_with_its_new_size() -> None:
    source = (BROKEN / "loader-shm.yaml").read_text()
    done = inject_shm(source)
    grown = done.stdout.replace("memory: 4Gi, nvidia.com/gpu: 1", "memory: 16Gi, nvidia.com/gpu: 1")
    assert grown != done.stdout
    again = pod_spec(inject_shm(grown).stdout)
    assert volumes(again)["tfboot-shm-train"]["emptyDir"]["sizeLimit"] == "4096Mi"


def test_an_earlier_shared_volume_is_taken_out_too() -> None:
    """A template an earlier tfboot injected with one ``tfboot-shm`` volume for every
    container: uninject still takes it out."""
    source = (BROKEN / "loader-shm.yaml").read_text()
    older = inject_shm(source).stdout.replace("tfboot-shm-train", "tfboot-shm")
    undone = tfboot("uninject", "-", stdin=older)
    assert undone.returncode == 0 and undone.stdout == source, undone.stderr


# -- every /dev/shm a Pod can have, read as what it is ----------------------------------


def container_with(mount: dict[str, Any] | None, volume: dict[str, Any] | None,
                   **pod: Any) -> tuple[dict[str, Any], dict[str, Any]]:  # fmt: skip
    spec = {"name": "train", "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}
    if mount is not None:
        spec["volumeMounts"].append(mount)
    volumes = [{"name": "tmp", "emptyDir": {}}, *([volume] if volume else [])]
    return spec, {"containers": [spec], "volumes": volumes, **pod}


@pytest.mark.parametrize(("mount", "volume", "pod", "kind", "what"), [
    (None, None, {}, RUNTIME, "the runtime's 64 MiB"),
    (None, None, {"hostIPC": True}, NODE, "the node's /dev/shm (the Pod has hostIPC: true)"),
    ({"name": "shm", "mountPath": "/dev/shm"},
     {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}, {}, MEMORY,
     "the emptyDir shm (medium: Memory, sizeLimit: 1Gi)"),
    ({"name": "shm", "mountPath": "/dev/shm/"}, {"name": "shm", "emptyDir": {"medium": "Memory"}},
     {}, MEMORY, "the emptyDir shm (medium: Memory, no sizeLimit)"),
    ({"name": "shm", "mountPath": "/dev/shm"},
     {"name": "shm", "hostPath": {"path": "/dev/shm", "type": "Directory"}}, {"hostIPC": False},
     NODE, "the node's /dev/shm (the hostPath volume shm)"),
    ({"name": "dev", "mountPath": "/dev/shm", "subPath": "shm"},
     {"name": "dev", "hostPath": {"path": "/dev/"}}, {}, NODE,
     "the node's /dev/shm (the hostPath volume dev)"),
    ({"name": "ram", "mountPath": "/dev/shm"}, {"name": "ram", "hostPath": {"path": "/mnt/ram"}},
     {}, OTHER, "the hostPath volume ram (/mnt/ram)"),
    ({"name": "shm", "mountPath": "/dev/shm"}, {"name": "shm", "emptyDir": {}}, {}, OTHER,
     "the emptyDir shm (on the node's disk)"),
    ({"name": "shm", "mountPath": "/dev/shm"},
     {"name": "shm", "persistentVolumeClaim": {"claimName": "scratch"}}, {}, OTHER,
     "a persistentVolumeClaim volume, shm"),
    ({"name": "gone", "mountPath": "/dev/shm"}, None, {}, OTHER,
     "the volume gone, which the Pod does not define"),
])  # fmt: skip
def test_each_dev_shm_is_read_as_what_it_is(mount: Any, volume: Any, pod: dict[str, Any],
                                            kind: str, what: str) -> None:  # fmt: skip
    spec, whole = container_with(mount, volume, **pod)
    found = dev_shm(spec, whole)
    assert (found.kind, found.what) == (kind, what)


def pytorch_pod(gpus: int, memory: str, mounts: list[Any], vols: list[Any],
                host_ipc: bool = False) -> str:  # fmt: skip
    """A hardened PyTorch Pod on ``gpus`` GPUs with ``memory``, its /dev/shm as given."""
    doc = yaml.safe_load((BROKEN / "loader-shm.yaml").read_text())
    train = doc["spec"]["containers"][0]
    train["resources"] = {
        "requests": {"cpu": "2", "memory": memory},
        "limits": {"cpu": "2", "memory": memory, "nvidia.com/gpu": gpus},
    }
    train["volumeMounts"] += mounts
    doc["spec"]["volumes"] += vols
    if host_ipc:
        doc["spec"]["hostIPC"] = True
    return yaml.safe_dump(doc)  # fmt: skip


SHM_MOUNT = [{"name": "shm", "mountPath": "/dev/shm"}]


@pytest.mark.parametrize("gpus", [1, 2])
def test_the_node_s_dev_shm_is_no_runtime_64_mib(gpus: int) -> None:
    """A PyTorch GPU container on the node's /dev/shm (a hostPath, or hostIPC): no loader-shm,
    no nccl-shm; a note that says its size is the node's, outside limits.memory."""
    host = [{"name": "shm", "hostPath": {"path": "/dev/shm"}}]
    for text in (pytorch_pod(gpus, "8Gi", SHM_MOUNT, host), pytorch_pod(gpus, "8Gi", [], [], True)):
        found = findings(text)
        assert set(found) & SHM_RULES == {"shm-host"}, [f.line() for f in found.values()]
        note = found["shm-host"]
        assert note.severity == "note"
        assert "its size is the node's (by default half its RAM), outside limits.memory" \
            in note.message  # fmt: skip
        assert "sizeLimit: 2048Mi at /dev/shm" in note.hint


@pytest.mark.parametrize("size", ["2Gi", None])
def test_a_memory_emptydir_is_no_runtime_64_mib(size: str | None) -> None:
    empty = {"medium": "Memory", **({"sizeLimit": size} if size else {})}
    for gpus in (1, 2):
        text = pytorch_pod(gpus, "8Gi", SHM_MOUNT, [{"name": "shm", "emptyDir": empty}])
        rules = set(findings(text)) & SHM_RULES
        assert rules == (set() if size else {"shm-size-limit"}), rules


@pytest.mark.parametrize(
    "volume",
    [
        {"emptyDir": {}},
        {"emptyDir": {"sizeLimit": "2Gi"}},
        {"persistentVolumeClaim": {"claimName": "scratch"}},
    ],
)
def test_a_dev_shm_not_in_memory_is_said_and_no_runtime_64_mib(volume: dict[str, Any]) -> None:
    for gpus in (1, 2):
        text = pytorch_pod(gpus, "4Gi", SHM_MOUNT, [{"name": "shm", **volume}])
        found = findings(text)
        assert set(found) & SHM_RULES == {"shm-not-memory"}, [f.line() for f in found.values()]
        assert "not memory" in found["shm-not-memory"].message
        assert "sizeLimit: 1024Mi at /dev/shm, a quarter of limits.memory" \
            in found["shm-not-memory"].hint  # fmt: skip


def test_loader_shm_only_where_the_limit_allows_more_than_the_runtime_gives() -> None:
    """Under 512Mi a quarter is no more than 64 MiB: no loader-shm (inject adds none either)."""
    assert set(findings(pytorch_pod(1, "4Gi", [], []))) & SHM_RULES == {"loader-shm"}
    assert set(findings(pytorch_pod(1, "256Mi", [], []))) & SHM_RULES == set()


def test_a_small_limit_s_fix_does_not_call_64_mib_a_quarter() -> None:
    text = pytorch_pod(
        1,
        "64Mi",
        SHM_MOUNT,
        [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}}],
    )
    found = findings(text)["shm-over-limit"]
    assert found.hint == "drop the volume (a quarter of limits.memory, 64Mi, is not more than " \
        "the runtime's 64 MiB), or raise limits.memory"  # fmt: skip


def test_a_size_limit_that_is_no_quantity_is_an_error() -> None:
    empty = {"medium": "Memory", "sizeLimit": "lots"}
    found = findings(pytorch_pod(1, "4Gi", SHM_MOUNT, [{"name": "shm", "emptyDir": empty}]))
    assert set(found) & (SHM_RULES | {"quantity-invalid"}) == {"quantity-invalid"}
    assert found["quantity-invalid"].message == (
        "/dev/shm is the emptyDir shm (medium: Memory, sizeLimit: lots), and its sizeLimit is "
        "not a quantity"
    )


@pytest.mark.parametrize(("memory", "size", "how"), [
    ("2Gi", "1024Mi", "the 1024 MiB NCCL needs (2 GPUs), within its limits.memory (2Gi)"),
    ("8Gi", "2048Mi", "a quarter of its limits.memory (8Gi)"),  # more than NCCL's least
    ("1536Mi", "384Mi", "a quarter of its limits.memory (1536Mi)"),  # 1 GiB is over half
])  # fmt: skip
def test_a_container_where_nccl_runs_gets_what_nccl_needs_where_the_limit_allows(
    memory: str, size: str, how: str
) -> None:
    """Two GPUs: NCCL needs 1 GiB of /dev/shm (tfboot warns at the import below it); where
    half the limit holds it, that is what inject gives, else the quarter, said either way."""
    source = pytorch_pod(2, memory, [], [])
    done = inject_shm(source)
    assert f"sizeLimit: {size} at /dev/shm, its own (volume tfboot-shm-train): {how}" in (
        done.stderr
    ), done.stderr
    assert volumes(pod_spec(done.stdout))["tfboot-shm-train"]["emptyDir"]["sizeLimit"] == size
    if size == "1024Mi":  # then manifests have nothing to say of /dev/shm
        assert not [rule for rule in shm_rules(done.stdout) if rule[1] in SHM_RULES]
    assert_round_trip(source, done.stdout)
