"""``tfboot inject`` proven with real parts: an app image nobody rebuilt for tfboot
(TensorFlow, its own ``sitecustomize`` and ``ENV PYTHONPATH``, no tfboot) and a Job for it;
the Job is injected by the real command, checked by ``kubectl kustomize``, schema validation
and ``tfboot manifests --strict``, then its Pod is replayed on the Docker engine exactly as
the manifest says: each init container in order (image, command, user, read-only root,
capabilities, the emptyDir as a named volume at its mount path), then the app container
(its env, the volume read-only at ``/tfboot``, its security context, ``/tmp`` as tmpfs).
Inside, the budget must be read back from TensorFlow, the image's ``sitecustomize`` must have
run and its ``PYTHONPATH`` must still work, also in a ``spawn`` child. The same for an image
that already has tfboot installed: exactly one copy configures TensorFlow, and ``tfboot
doctor`` names it. Image mode cannot be replayed here (the engine has no image volumes):
its manifests are validated only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from container_runs import QUIET_TF
from image_builds import IMAGE_PREFIX, REPO, STANDINS, build_lock, build_standin_base, run
from kustomize import KUBERNETES_VERSIONS, render_text
from support import last_json
from testcontainers.core.container import DockerContainer

pytestmark = [pytest.mark.docker, pytest.mark.k8s, pytest.mark.slow]
APP = Path(__file__).resolve().parent / "testdata" / "inject" / "app"
SECURE = {
    "runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
    "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
}  # fmt: skip


def job(image: str, command: list[str], secure: bool = True,
        security: dict[str, Any] | None = None) -> str:  # fmt: skip
    """The app's Job as its team wrote it (comments included), before injection; with
    ``secure``, its container's securityContext is ``security`` (default ``SECURE``)."""
    container: dict[str, Any] = {
        "name": "train", "image": image, "command": command,
        "env": [{"name": "CPU_THREADS", "value": "2"}],
        "resources": {"requests": {"cpu": "1", "memory": "2Gi"},
                      "limits": {"cpu": "2", "memory": "2Gi"}},
    }  # fmt: skip
    if secure:
        container["securityContext"] = security or SECURE
        container["volumeMounts"] = [{"name": "tmp", "mountPath": "/tmp"}]
    pod = {"restartPolicy": "Never", "containers": [container]}
    if secure:
        pod["volumes"] = [{"name": "tmp", "emptyDir": {}}]
    doc = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
           "spec": {"backoffLimit": 0, "template": {"spec": pod}}}  # fmt: skip
    return "# the app team's Job\n" + yaml.safe_dump(doc, sort_keys=False)


def tfboot(*args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfboot", *args], input=stdin, text=True,
                          capture_output=True, timeout=120)  # fmt: skip


@pytest.fixture(scope="module")
def base_image(docker_engine: None) -> str:
    return build_standin_base()


@pytest.fixture(scope="module")
def injector(base_image: str) -> str:
    """The injector image, built from the checkout on a base with sh and cp."""
    tag = f"{IMAGE_PREFIX}/inject:test"
    with build_lock():
        run(["bash", str(REPO / "docker" / "inject" / "build.sh"), tag],
            env={**os.environ, "BASE_IMAGE": base_image, "PYTHON": sys.executable})  # fmt: skip
    return tag


def app_on(base: str, name: str) -> str:
    tag = f"{IMAGE_PREFIX}/inject-{name}:test"
    with build_lock():
        run(["docker", "build", "--quiet", "--network", "none", "--tag", tag,
             "--build-arg", f"BASE_IMAGE={base}", str(APP)])  # fmt: skip
    return tag


def _security(sc: dict[str, Any]) -> dict[str, Any]:
    """Docker settings equal to a container's securityContext."""
    settings: dict[str, Any] = {}
    if "runAsUser" in sc:
        settings["user"] = f"{sc['runAsUser']}:{sc.get('runAsGroup', sc['runAsUser'])}"
    if sc.get("readOnlyRootFilesystem"):
        settings["read_only"] = True
    if (sc.get("capabilities") or {}).get("drop"):
        settings["cap_drop"] = sc["capabilities"]["drop"]
    if sc.get("allowPrivilegeEscalation") is False:
        settings["security_opt"] = ["no-new-privileges:true"]
    return settings


def _sub_path(volume: str, sub_path: str, image: str, into: Path) -> str:
    """A file of a named volume, copied out to bind it where the manifest mounts it with
    ``subPath`` (the engine here mounts no part of a volume; the kubelet bind-mounts it)."""
    done = subprocess.run(["docker", "run", "--rm", "-u", "0", "--entrypoint", "cat", "-v",
                           f"{volume}:/v:ro", image, f"/v/{sub_path}"],
                          check=True, capture_output=True)  # fmt: skip
    into.mkdir(parents=True, exist_ok=True)
    path = into / sub_path.replace("/", "_")
    path.write_bytes(done.stdout)
    path.chmod(0o644)
    return str(path)


def start(spec: dict[str, Any], volumes: dict[str, str], files: Path | None = None,
          user: str | None = None) -> tuple[int, str, str]:  # fmt: skip
    """Run one container of a Pod as the kubelet would: its image, command, env, mounts and
    security context; emptyDir volumes are the named Docker volumes of ``volumes``. A
    ``user`` (``UID:GID``) is the one the platform gives it (OpenShift's SCC)."""
    container = DockerContainer(spec["image"])
    settings = _security(spec.get("securityContext") or {})
    if user is not None:
        assert "user" not in settings, spec["securityContext"]  # the platform's UID, no other
        settings["user"] = user
    if spec.get("command"):
        settings["entrypoint"] = spec["command"]
    if spec.get("args"):
        container.with_command(spec["args"])
    for entry in spec.get("env") or []:
        container.with_env(entry["name"], entry["value"])  # no valueFrom in these Pods
    for key, value in QUIET_TF.items():
        container.with_env(key, value)
    tmpfs = []
    for mount in spec.get("volumeMounts") or []:
        if "subPath" in mount:
            assert files is not None and mount.get("readOnly"), mount
            file = _sub_path(volumes[mount["name"]], mount["subPath"], spec["image"], files)
            container.with_volume_mapping(file, mount["mountPath"], "ro")
        elif mount["name"] == "tmp":
            tmpfs.append(mount["mountPath"])
        else:
            mode = "ro" if mount.get("readOnly") else "rw"
            container.with_volume_mapping(volumes[mount["name"]], mount["mountPath"], mode)
    for path in tmpfs:
        container.with_tmpfs_mount(path)
    container.with_kwargs(**settings)  # one call: each replaces the last
    with container:
        status = container.get_wrapped_container().wait(timeout=300)
        stdout, stderr = container.get_logs()
    return int(status["StatusCode"]), stdout.decode(), stderr.decode()


def replay(text: str, command: list[str] | None = None, files: Path | None = None,
           user: str | None = None) -> tuple[int, str, str]:  # fmt: skip
    """The injected Job's Pod on the engine: its init containers in order, then the app
    container (with ``command`` in place of its own, where given); every one as ``user``
    where given."""
    (doc,) = [d for d in yaml.safe_load_all(text) if d and d["kind"] == "Job"]
    pod = doc["spec"]["template"]["spec"]
    volumes = {}
    for volume in pod["volumes"]:
        assert set(volume) == {"name", "emptyDir"}, volume
        volumes[volume["name"]] = f"tfboot-test-{uuid.uuid4().hex[:12]}"
        name = volumes[volume["name"]]
        subprocess.run(["docker", "volume", "create", name], check=True, capture_output=True)
        # An emptyDir is a directory every user may write (mode 0777), as the kubelet makes it.
        subprocess.run(["docker", "run", "--rm", "-u", "0", "--entrypoint", "chmod", "-v",
                        f"{name}:/v", pod["containers"][0]["image"], "0777", "/v"],
                       check=True, capture_output=True)  # fmt: skip
    try:
        for init in pod.get("initContainers") or []:
            status, out, err = start(init, volumes, user=user)
            assert status == 0, (init["name"], out, err)
        app = pod["containers"][0]
        return start({**app, **({"command": command} if command else {})}, volumes, files, user)
    finally:
        subprocess.run(["docker", "volume", "rm", "-f", *volumes.values()], capture_output=True)


def validated(kubectl: str, text: str, tmp_path: Path, versions: tuple[str, ...]) -> None:
    """The injected manifest passes kustomize, schema validation and the strict checker."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "job.yaml").write_text(text)
    (tmp_path / "kustomization.yaml").write_text("resources: [job.yaml]\n")
    rendered = render_text(kubectl, tmp_path)
    for doc in yaml.safe_load_all(rendered):
        for version in versions:
            kubernetes_validate.validate(doc, version, strict=True)
    checked = tfboot("manifests", "--strict", "-", stdin=rendered)
    assert checked.returncode == 0, checked.stdout + checked.stderr


PROBE = ["python3", "/app/probe.py"]


def test_an_unmodified_image_gets_the_budget_and_keeps_its_own_start_up(
    injector: str, base_image: str, kubectl: str, tmp_path: Path
) -> None:
    original = job(app_on(base_image, "app"), PROBE)
    injected = tfboot("inject", "--image", injector, "-", stdin=original)
    assert injected.returncode == 0, injected.stderr
    assert injected.stdout.startswith("# the app team's Job\n")
    validated(kubectl, injected.stdout, tmp_path, KUBERNETES_VERSIONS)
    again = tfboot("inject", "--image", injector, "-", stdin=injected.stdout)
    assert again.stdout == injected.stdout  # twice is once
    assert tfboot("uninject", "-", stdin=injected.stdout).stdout == original

    status, out, err = replay(injected.stdout)
    assert status == 0, err
    found = last_json(out)
    assert (found["intra"], found["inter"]) == (2, 2), (found, err)
    assert err.count("tfboot: configured TensorFlow") == 1, err
    for seen in (found, found["spawn_child"]):
        assert seen["applib"] == "applib" and seen["image_sitecustomize"] is True, seen
        assert seen["tfboot"] == "/tfboot/site/tfboot/__init__.py", seen
        assert seen["injected"] == ["/tfboot/hook", "/tfboot/site"], seen

    status, out, err = replay(injected.stdout, ["python3", "-m", "tfboot", "doctor", "--json"])
    assert status == 0, err
    doctor = last_json(out)
    assert doctor["copy"]["path"] == "/tfboot/site/tfboot" and doctor["copy"]["injected"], doctor
    assert doctor["startup"]["ran"] is True, doctor


def test_an_image_with_tfboot_already_keeps_its_own_copy(
    injector: str, tfboot_image: str, kubectl: str, tmp_path: Path
) -> None:
    """As root with a writable root (the image's defaults), the image's own copy runs."""
    original = job(app_on(tfboot_image, "app-with-tfboot"), PROBE, secure=False)
    injected = tfboot("inject", "--image", injector, "-", stdin=original)
    assert injected.returncode == 0, injected.stderr
    status, out, err = replay(injected.stdout)
    assert status == 0, err
    found = last_json(out)
    assert (found["intra"], found["inter"]) == (2, 2), (found, err)
    assert err.count("tfboot: configured TensorFlow") == 1, err
    assert found["tfboot"].endswith("-packages/tfboot/__init__.py"), found  # the image's
    assert found["image_sitecustomize"] is True and found["applib"] == "applib", found
    status, out, err = replay(injected.stdout, ["python3", "-m", "tfboot", "doctor"])
    assert status == 0, err
    assert "the image's own tfboot" in out and "injected copy stood down" in out, out


def test_image_mode_manifests_validate(kubectl: str, tmp_path: Path) -> None:
    original = job("registry.example/train:1.0", PROBE)
    annotated = original.replace("  template:\n", "  template:\n    metadata:\n      annotations:\n"
                                 "        tfboot/image-pythonpath: /app/lib\n", 1)  # fmt: skip
    injected = tfboot("inject", "--image", "registry.example/tfboot-inject:0.1.0", "--mode",
                      "image", "-", stdin=annotated)  # fmt: skip
    assert injected.returncode == 0, injected.stderr
    (doc,) = yaml.safe_load_all(injected.stdout)
    pod = doc["spec"]["template"]["spec"]
    assert "initContainers" not in pod and pod["volumes"][-1]["image"]["reference"]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert env["PYTHONPATH"] == "/tfboot/hook:/app/lib"
    validated(kubectl, injected.stdout, tmp_path, KUBERNETES_VERSIONS[-1:])
    assert tfboot("uninject", "-", stdin=injected.stdout).stdout == annotated


def test_the_pth_way_reaches_python_minus_i(
    injector: str, base_image: str, kubectl: str, tmp_path: Path
) -> None:
    """``python -I`` ignores PYTHONPATH: with the image's site-packages named, the tree's
    ``.pth`` is mounted there and starts tfboot all the same; PYTHONPATH is left alone."""
    isolated = ["python3", "-I", "-c", "import tensorflow as tf, json; print(json.dumps("
                "{'intra': tf.config.threading.get_intra_op_parallelism_threads()}))"]  # fmt: skip
    original = job(app_on(base_image, "app"), isolated).replace(
        "  template:\n", "  template:\n    metadata:\n      annotations:\n"
        "        tfboot/site-packages: /usr/local/lib/python3.11/dist-packages\n", 1)  # fmt: skip
    injected = tfboot("inject", "--image", injector, "-", stdin=original)
    assert injected.returncode == 0 and "-I" not in injected.stderr, injected.stderr
    (doc,) = yaml.safe_load_all(injected.stdout)
    (app,) = doc["spec"]["template"]["spec"]["containers"]
    assert "PYTHONPATH" not in {e["name"] for e in app["env"]}
    validated(kubectl, injected.stdout, tmp_path / "k", KUBERNETES_VERSIONS)
    status, out, err = replay(injected.stdout, files=tmp_path / "files")
    assert status == 0, err
    assert last_json(out)["intra"] == 2 and err.count("tfboot: configured TensorFlow") == 1, err
    plain = replay(tfboot("inject", "--image", injector, "-", stdin=original.replace(
        "tfboot/site-packages", "example/unrelated")).stdout)  # fmt: skip
    assert plain[0] == 0 and last_json(plain[1])["intra"] != 2  # -I: the hook never ran


STARTED = ("import sys, json; t = sys.modules.get('tfboot'); print(json.dumps({'python': "
           "list(sys.version_info[:2]), 'tfboot': getattr(t, '__file__', None), 'started': "
           "getattr(t, 'STARTED', None), "
           "'own': sys.modules['sitecustomize'].__file__}))")  # fmt: skip


@pytest.mark.parametrize("python", sorted(STANDINS))
def test_every_python_an_image_may_carry_starts_it(injector: str, python: str) -> None:
    """Debian's Python of each stand-in (3.15's through PEP 829's ``tfboot.start``), as a
    non-root user with a read-only root: tfboot starts from the tree, and Debian's own
    ``sitecustomize`` still runs after the hook."""
    base = build_standin_base(STANDINS[python])
    injected = tfboot(
        "inject", "--image", injector, "-", stdin=job(base, ["python3", "-c", STARTED])
    )
    assert injected.returncode == 0, injected.stderr
    status, out, err = replay(injected.stdout)
    assert status == 0 and err == "", err
    found = last_json(out)
    assert found["python"] == [int(x) for x in python.split(".")], found
    assert found["tfboot"] == "/tfboot/site/tfboot/__init__.py" and found["started"] is True
    assert found["own"].startswith(("/usr/lib/python3", "/etc/python3")), found  # Debian's


# A door between containers: in init mode every image of the Pod runs as a probe. One whose
# `sh` is hostile tries to rewrite the tree every injected container runs, and the record
# of another container's PYTHONPATH; it can reach neither (only the copy container mounts
# the tree writable, and each probe writes a record volume only its own app mounts).
HOSTILE_SH = """#!/bin/sh
for target in /tfboot-volume/hook/sitecustomize.py /tfboot-volume/site/tfboot/__init__.py \
    /tfboot-env/train.pythonpath /tfboot/env/train.pythonpath; do
  (echo 'raise SystemExit("the tree was changed by another image")' > "$target") 2>/dev/null \
    && echo "wrote $target" >&2
done
exec /bin/sh "$@"
"""


def test_no_image_of_the_pod_can_change_what_another_container_runs(
    injector: str, base_image: str, tmp_path: Path
) -> None:
    app = app_on(base_image, "app")
    context = tmp_path / "hostile"
    context.mkdir()
    (context / "sh").write_text(HOSTILE_SH)
    (context / "Dockerfile").write_text(
        f"FROM {app}\nUSER 0\nCOPY sh /evil/sh\nRUN chmod 0755 /evil/sh\nENV PATH=/evil:$PATH\n"
    )
    hostile = f"{IMAGE_PREFIX}/inject-hostile:test"
    with build_lock():
        run(["docker", "build", "--quiet", "--network", "none", "--tag", hostile, str(context)])
    doc = yaml.safe_load(job(app, PROBE))
    sidecar = {"name": "sidecar", "image": hostile, "command": ["sleep", "1"],
               "securityContext": SECURE}  # fmt: skip
    doc["spec"]["template"]["spec"]["containers"].append(sidecar)
    injected = tfboot("inject", "--image", injector, "-", stdin=yaml.safe_dump(doc))
    assert injected.returncode == 0, injected.stderr
    pod = yaml.safe_load(injected.stdout)["spec"]["template"]["spec"]
    writable = [(c["name"], m["name"]) for c in pod["initContainers"] + pod["containers"]
                for m in c.get("volumeMounts", []) if m["name"] == "tfboot" and not
                m.get("readOnly")]  # fmt: skip
    assert writable == [("tfboot-inject", "tfboot")], writable
    status, out, err = replay(injected.stdout)
    assert status == 0, err
    found = last_json(out)
    assert (found["intra"], found["inter"]) == (2, 2), (found, err)
    assert found["tfboot"] == "/tfboot/site/tfboot/__init__.py", found
    assert found["applib"] == "applib" and found["image_sitecustomize"] is True, found


# OpenShift's restricted-v2 SCC refuses a container that asks for a runAsUser outside the
# namespace's range, and runs every container of the Pod as an arbitrary UID in group 0.
OPENSHIFT_USER = "1000680000:0"


def test_openshift_restricted_v2_an_arbitrary_uid_in_group_0_gets_the_budget(
    injector: str, base_image: str, kubectl: str, tmp_path: Path
) -> None:
    """No injected container asks for a UID; each runs as the platform's arbitrary UID with
    GID 0: the copy reads the injector's tree and fills the volume, the probe records the
    image's PYTHONPATH, and the app runs tfboot's code and gets its budget."""
    restricted = {k: v for k, v in SECURE.items() if k not in ("runAsUser", "runAsGroup")}
    original = job(app_on(base_image, "app"), PROBE, security=restricted)
    injected = tfboot("inject", "--image", injector, "-", stdin=original)
    assert injected.returncode == 0, injected.stderr
    pod = yaml.safe_load(injected.stdout)["spec"]["template"]["spec"]
    asked = [(c["name"], c["securityContext"]) for c in pod["initContainers"] + pod["containers"]
             if {"runAsUser", "runAsGroup"} & set(c["securityContext"])]  # fmt: skip
    assert asked == [], asked
    validated(kubectl, injected.stdout, tmp_path, KUBERNETES_VERSIONS[-1:])
    status, out, err = replay(injected.stdout, user=OPENSHIFT_USER)
    assert status == 0, err
    found = last_json(out)
    assert (found["intra"], found["inter"]) == (2, 2), (found, err)
    assert err.count("tfboot: configured TensorFlow") == 1, err
    assert found["tfboot"] == "/tfboot/site/tfboot/__init__.py", found
    assert found["applib"] == "applib" and found["image_sitecustomize"] is True, found
