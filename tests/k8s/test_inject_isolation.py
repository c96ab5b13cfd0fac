"""``tfboot inject`` never opens a door between containers and never takes a user's name.

Regression tests for the outside probe of inject: every app image of the Pod ran as a probe
init container with tfboot's tree mounted writable, and a user's volume named ``tfboot`` was
deleted and taken. Pure: the command's output, parsed. The replay on Docker of a hostile
image is in ``test_inject_replay.py``.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

IMAGE = "registry.example/tfboot-inject:0.1.0"


def job(pod_extra: dict | None = None, sidecar: bool = True) -> str:
    containers = [{"name": "train", "image": "registry.example/train:1.0"}]
    if sidecar:
        containers.append({"name": "proxy", "image": "registry.example/proxy:2.0"})
    pod = {"restartPolicy": "Never", "containers": containers, **(pod_extra or {})}
    return yaml.safe_dump({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                           "spec": {"template": {"spec": pod}}}, sort_keys=False)  # fmt: skip


def tfboot(*args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfboot", *args], input=stdin, text=True,
                          capture_output=True, timeout=60)  # fmt: skip


def injected_pod(text: str) -> dict:
    done = tfboot("inject", "--image", IMAGE, "-", stdin=text)
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)["spec"]["template"]["spec"]


def mounts(container: dict) -> dict[str, tuple[str, bool]]:
    return {m["name"]: (m["mountPath"], bool(m.get("readOnly")))
            for m in container.get("volumeMounts", [])}  # fmt: skip


def test_only_the_copy_writes_the_tree_and_each_probe_only_its_own_record() -> None:
    pod = injected_pod(job())
    inits = {c["name"]: mounts(c) for c in pod["initContainers"]}
    assert inits == {
        "tfboot-inject": {"tfboot": ("/tfboot-volume", False)},
        "tfboot-env-train": {"tfboot-env-train": ("/tfboot-env", False)},
        "tfboot-env-proxy": {"tfboot-env-proxy": ("/tfboot-env", False)},
    }
    apps = {c["name"]: mounts(c) for c in pod["containers"]}
    assert apps == {
        name: {"tfboot": ("/tfboot", True), f"tfboot-env-{name}": ("/tfboot/env", True)}
        for name in ("train", "proxy")
    }
    volumes = {v["name"]: v["emptyDir"]["sizeLimit"] for v in pod["volumes"]}
    assert volumes == {"tfboot": "64Mi", "tfboot-env-train": "1Mi", "tfboot-env-proxy": "1Mi"}


def test_the_checker_flags_a_probe_that_mounts_the_tree_writable() -> None:
    done = tfboot("inject", "--image", IMAGE, "-", stdin=job(sidecar=False))
    doc = yaml.safe_load(done.stdout)
    probe = doc["spec"]["template"]["spec"]["initContainers"][1]
    probe["volumeMounts"].append({"name": "tfboot", "mountPath": "/tfboot-volume"})  # the old way
    checked = tfboot("manifests", "-", stdin=yaml.safe_dump(doc))
    assert checked.returncode == 1
    assert "inject-mount" in checked.stdout and "mounts the tfboot volume writable" in (
        checked.stdout
    )


@pytest.mark.parametrize(
    ("extra", "what", "name"),
    [
        ({"volumes": [{"name": "tfboot", "configMap": {"name": "tfboot-env-file"}}]},
         "volume", "tfboot"),
        ({"volumes": [{"name": "tfboot-env-train", "emptyDir": {}}]}, "volume",
         "tfboot-env-train"),
        ({"initContainers": [{"name": "tfboot-inject", "image": "busybox:1.37"}]},
         "init container", "tfboot-inject"),
    ],
)  # fmt: skip
def test_a_users_name_is_never_taken(extra: dict, what: str, name: str) -> None:
    text = job(extra)
    done = tfboot("inject", "--image", IMAGE, "-", stdin=text)
    assert done.returncode != 0 and done.stdout == ""
    assert f"the Pod already has a {what} named {name!r}, a name tfboot inject" in done.stderr
    # uninject of a manifest never injected leaves it as it is
    assert tfboot("uninject", "-", stdin=text).stdout == text


def test_reinjecting_keeps_its_own_parts_and_uninject_restores() -> None:
    text = job()
    once = tfboot("inject", "--image", IMAGE, "-", stdin=text).stdout
    other = tfboot("inject", "--image", IMAGE + "-b", "-", stdin=once)
    assert other.returncode == 0, other.stderr
    assert tfboot("uninject", "-", stdin=other.stdout).stdout == text
