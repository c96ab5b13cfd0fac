"""``tfboot inject --shm``: a memory-backed /dev/shm sized from limits.memory, said in the
output, clean under ``tfboot manifests``, and taken out by ``uninject`` byte for byte."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

BROKEN = Path(__file__).parent / "testdata" / "broken"
IMAGE = "registry.example.com/tfboot-inject:1.0.0"


def tfboot(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfboot", *args], input=stdin, text=True,
                          capture_output=True, timeout=120)  # fmt: skip


def test_shm_is_added_sized_from_the_limit_and_taken_out_again() -> None:
    source = (BROKEN / "loader-shm.yaml").read_text()  # limits.memory 4Gi, a PyTorch image
    before = tfboot("manifests", "--json", "-", stdin=source)
    assert '"rule": "loader-shm"' in before.stdout, before.stdout
    done = tfboot("inject", "--image", IMAGE, "--shm", "-", stdin=source)
    assert done.returncode == 0, done.stderr
    assert "Pod/loader-shm: /dev/shm: an emptyDir with medium: Memory and sizeLimit: 1024Mi (a " \
        "quarter of limits.memory) mounted in train; its pages count against limits.memory " \
        "(--shm; uninject takes it out)" in done.stderr, done.stderr  # fmt: skip
    pod = yaml.safe_load(done.stdout)
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "tfboot-shm")
    assert volume["emptyDir"] == {"medium": "Memory", "sizeLimit": "1024Mi"}
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "tfboot-shm", "mountPath": "/dev/shm"} in mounts
    checked = tfboot("manifests", "--json", "--strict", "-", stdin=done.stdout)
    assert checked.returncode == 0 and "shm" not in checked.stdout, checked.stdout
    again = tfboot("inject", "--image", IMAGE, "--shm", "-", stdin=done.stdout)
    assert again.stdout == done.stdout  # injected as asked already: nothing changes
    undone = tfboot("uninject", "-", stdin=done.stdout)
    assert undone.returncode == 0 and undone.stdout == source, undone.stderr


def test_without_the_option_or_a_limit_nothing_is_added() -> None:
    source = (BROKEN / "loader-shm.yaml").read_text()
    plain = yaml.safe_load(tfboot("inject", "--image", IMAGE, "-", stdin=source).stdout)
    assert all(v["name"] != "tfboot-shm" for v in plain["spec"]["volumes"])
    unlimited = source.replace("memory: 4Gi, nvidia.com/gpu: 1", "nvidia.com/gpu: 1")
    assert unlimited != source
    done = tfboot("inject", "--image", IMAGE, "--shm", "-", stdin=unlimited)
    assert done.returncode == 0, done.stderr
    assert "/dev/shm not added: a container without limits.memory, which its size is taken " \
        "from (--shm)" in done.stderr  # fmt: skip
    assert all(v["name"] != "tfboot-shm" for v in yaml.safe_load(done.stdout)["spec"]["volumes"])


def test_a_container_with_its_own_dev_shm_keeps_it() -> None:
    source = (BROKEN / "shm-over-limit.yaml").read_text()  # its own 8Gi emptyDir at /dev/shm
    done = tfboot("inject", "--image", IMAGE, "--shm", "-", stdin=source)
    assert done.returncode == 0 and "/dev/shm" not in done.stderr, done.stderr
    pod = yaml.safe_load(done.stdout)
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert [m for m in mounts if m["mountPath"] == "/dev/shm"] == [
        {"name": "shm", "mountPath": "/dev/shm"}
    ]
