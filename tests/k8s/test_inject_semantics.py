"""``tfboot inject`` mirrors the platform's semantics, and undo compares the record with the
present (regressions of the outside probe of inject).

- The kubelet gives a container the last of an env variable given twice (kustomize and
  Helm merges leave such lists): the hook goes into the last ``PYTHONPATH``, and
  ``MEMORY_LIMIT_MB`` and ``TFBOOT_INJECTED`` are read the same way.
- uninject (and inject again, which takes out first) keeps a value the user changed after
  inject, and says what it could not undo.
- Inject again after the app moved to a new image updates the probe that runs that image.
- Probe and record-volume names cut to 63 characters stay unique DNS labels.
- ``-I``, ``-E``, ``-S`` are found as CPython reads its command line.
- The injected init containers ask for no fixed UID (OpenShift's ``restricted-v2``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

IMAGE = "registry.example/tfboot-inject:0.1.0"
TESTDATA = Path(__file__).resolve().parent / "testdata"
HEAD = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  template:\n    spec:\n"
# One container, train, whose env list the test goes on with.
TRAIN = HEAD + (
    "      containers:\n      - name: train\n        image: registry.example/train:1.0\n"
    "        env:\n"
)
TWICE = (
    TRAIN
    + """\
        - name: PYTHONPATH
          value: /base/lib   # the base's, merged
        - name: PYTHONPATH
          value: /overlay/lib   # the overlay's: the one the process gets
"""
)
# The same Pod with MEMORY_LIMIT_MB twice (a merge): the kubelet gives the last, auto.
FIRST = '        - name: MEMORY_LIMIT_MB\n          value: "12000"\n'
DRA_POD = (
    (TESTDATA / "dra" / "pod.yaml")
    .read_text()
    .replace("        - name: MEMORY_LIMIT_MB\n", FIRST + "        - name: MEMORY_LIMIT_MB\n", 1)
)
CAP = str(10 * 1024 - 1536)  # the claim's 10Gi minus TensorFlow's headroom


def tfboot(*args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfboot", *args], input=stdin, text=True,
                          capture_output=True, timeout=60)  # fmt: skip


def inject(text: str, *extra: str, image: str = IMAGE) -> subprocess.CompletedProcess[str]:
    done = tfboot("inject", "--image", image, *extra, "-", stdin=text)
    assert done.returncode == 0, done.stderr
    return done


def uninject(text: str) -> str:
    done = tfboot("uninject", "-", stdin=text)
    assert done.returncode == 0, done.stderr
    return done.stdout


def pod(text: str) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all(text) if d and d["kind"] in ("Job", "Pod")]
    return doc["spec"]["template"]["spec"] if doc["kind"] == "Job" else doc["spec"]


def values(container: dict[str, Any], name: str) -> list[str]:
    return [e.get("value") for e in container.get("env") or [] if e["name"] == name]


def with_claims(text: str) -> str:
    return text + "---\n" + (TESTDATA / "dra" / "claims.yaml").read_text()


# 1. The last entry wins.


def test_the_hook_goes_into_the_last_of_two_pythonpaths() -> None:
    out = inject(TWICE).stdout
    (app,) = pod(out)["containers"]
    assert values(app, "PYTHONPATH") == ["/base/lib", "/tfboot/hook:/overlay/lib"]
    assert "          value: /tfboot/hook:/overlay/lib   # the overlay's" in out
    assert [c["name"] for c in pod(out)["initContainers"]] == ["tfboot-inject"]  # no probe
    assert uninject(out) == TWICE
    assert inject(out).stdout == out


def test_the_checker_flags_a_second_pythonpath_after_the_hook() -> None:
    """A merge that appends PYTHONPATH after inject's: the process never gets the hook."""
    doc = yaml.safe_load(
        inject(
            TWICE.replace(
                "        - name: PYTHONPATH\n          value: /base/lib   # the base's, merged\n",
                "",
            )
        ).stdout
    )
    doc["spec"]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "PYTHONPATH", "value": "/late/lib"}
    )  # fmt: skip
    found = json.loads(tfboot("manifests", "--json", "-", stdin=yaml.safe_dump(doc)).stdout)
    messages = [f["message"] for f in found["findings"] if f["rule"] == "inject-pythonpath"]
    assert any("given 2 times" in m and "'/late/lib'" in m for m in messages), found


def test_the_memory_limit_is_carried_into_the_last_entry() -> None:
    text = with_claims(DRA_POD)
    out = inject(text, "--memory-from-claims").stdout
    (app,) = pod(out)["containers"]
    assert values(app, "MEMORY_LIMIT_MB") == ["12000", CAP]
    assert uninject(out) == text


def test_a_containers_own_tfboot_injected_is_kept() -> None:
    """Uninject takes out the TFBOOT_INJECTED entry inject added (the last), no other."""
    text = (
        TRAIN
        + """\
        - name: TFBOOT_INJECTED
          value: kept
"""
    )
    out = inject(text).stdout
    (app,) = pod(out)["containers"]
    assert values(app, "TFBOOT_INJECTED") == ["kept", "train"]
    assert uninject(out) == text


# 2. Undo compares the record with the present.


def test_uninject_keeps_an_entry_added_after_the_hook() -> None:
    text = TWICE.replace("        - name: PYTHONPATH\n          value: /base/lib   # the base's, "
                         "merged\n", "")  # fmt: skip
    out = inject(text).stdout
    changed = out.replace(
        "value: /tfboot/hook:/overlay/lib ", "value: /tfboot/hook:/overlay/lib:/user/added "
    )
    back = uninject(changed)
    assert back == text.replace("/overlay/lib", "/overlay/lib:/user/added")
    again = inject(changed, image=IMAGE + "-b")  # inject again takes out first, and says so
    (app,) = pod(again.stdout)["containers"]
    assert values(app, "PYTHONPATH") == ["/tfboot/hook:/overlay/lib:/user/added"]
    assert "container train: PYTHONPATH was changed after tfboot inject" in again.stderr
    assert "leaving '/overlay/lib:/user/added'" in again.stderr
    assert uninject(again.stdout) == back


def test_uninject_keeps_a_pythonpath_given_to_a_probed_container() -> None:
    text = HEAD + "      containers:\n      - name: train\n        image: registry.example/t:1\n"
    out = inject(text).stdout
    (app,) = pod(out)["containers"]
    assert values(app, "PYTHONPATH") == ["/tfboot/hook"]
    back = yaml.safe_load(uninject(out.replace("value: /tfboot/hook\n",
                                               "value: /tfboot/hook:/user/lib\n")))  # fmt: skip
    (app,) = back["spec"]["template"]["spec"]["containers"]
    assert app["env"] == [{"name": "PYTHONPATH", "value": "/user/lib"}]
    assert "initContainers" not in back["spec"]["template"]["spec"]


def test_uninject_says_what_it_could_not_undo() -> None:
    """The notes uninject returns (``tfboot uninject`` prints them as inject's)."""
    from tfboot.inject.patch import uninject as take_out

    out = inject(with_claims(DRA_POD), "--memory-from-claims").stdout
    doc = next(yaml.safe_load_all(out))
    doc["spec"]["containers"][0]["env"][1]["value"] = "6000"  # the user's change
    notes = take_out(doc, "Pod/train")
    (app,) = doc["spec"]["containers"]
    assert values(app, "MEMORY_LIMIT_MB") == ["12000", "6000"]  # the user's, kept
    assert notes == ["Pod/train container train: MEMORY_LIMIT_MB was changed after tfboot "
                     f"inject (now '6000'; inject wrote '{CAP}'), so it is kept (before inject "
                     "it was 'auto')"]  # fmt: skip
    assert (
        take_out(next(yaml.safe_load_all(out)), "Pod/train") == []
    )  # unchanged: all undone, no note


# 3. Inject again follows the app.


def test_inject_again_follows_the_app_to_a_new_image() -> None:
    text = HEAD + "      containers:\n      - name: train\n        image: registry.example/t:1\n"
    out = inject(text).stdout
    moved = out.replace("image: registry.example/t:1", "image: registry.example/t:2", 1)
    assert pod(moved)["initContainers"][1]["image"] == "registry.example/t:1"  # the app's only
    again = inject(moved).stdout
    probe = pod(again)["initContainers"][1]
    assert (probe["name"], probe["image"]) == ("tfboot-env-train", "registry.example/t:2")
    assert inject(again).stdout == again  # twice is once still
    assert uninject(again) == text.replace("t:1", "t:2")


# 4. Names tfboot gives its parts stay unique DNS labels.


def test_long_container_names_get_distinct_probe_names() -> None:
    # Names Kubernetes accepts (at most 63) whose probes, 11 characters longer, must be cut
    first, second = "a" * 50 + "-first-one", "a" * 50 + "-first-two"  # cut alike at 63
    text = (
        HEAD
        + "      containers:\n"
        + "".join(
            f"      - name: {n}\n        image: registry.example/t:1\n" for n in (first, second)
        )
    )
    out = inject(text).stdout
    spec = pod(out)
    probes = [c["name"] for c in spec["initContainers"][1:]]
    volumes = [v["name"] for v in spec["volumes"][1:]]
    assert len(set(probes)) == 2 and volumes == probes, probes
    label = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    assert all(label.match(n) for n in probes), probes
    for app, probe in zip(spec["containers"], probes, strict=True):
        mounted = {m["name"] for m in app["volumeMounts"]}
        assert probe in mounted and not set(probes) - {probe} & mounted
    assert uninject(out) == text
    assert inject(out).stdout == out


# 5. Python's options as CPython reads them.


@pytest.mark.parametrize(
    ("command", "found"),
    [
        (["python", "-X", "faulthandler", "-I", "t.py"], ["-I"]),
        (["python3", "-W", "ignore", "-E", "x.py"], ["-E"]),
        (["python3", "-Wignore", "-IE", "x.py"], ["-I", "-E"]),
        (["python3", "-bb", "-W", "error::DeprecationWarning", "-S"], ["-S"]),
        (["python3", "--check-hash-based-pycs", "always", "-S", "x.py"], ["-S"]),
        (["python3", "-Ic", "pass"], ["-I"]),
        (["python3", "-X", "-I", "x.py"], []),  # -I is -X's value
        (["python3", "-c", "import x", "-I"], []),  # -c ends the options
        (["python3", "-m", "train", "-E"], []),  # -m too
        (["python3", "train.py", "-S"], []),  # the script's own argument
        (["python3", "-", "-I"], []),  # stdin
        (["sh", "-c", "cd /w && exec python3 -X dev -I train.py"], ["-I"]),
        (["sh", "-c", "python3 -c 'x' -S; python3 -W ignore -E t.py"], ["-E"]),
    ],
)  # fmt: skip
def test_options_are_read_as_cpython_reads_them(command: list[str], found: list[str]) -> None:
    from tfboot.kube.interpreter import ignored_by

    assert [why.split()[0] for why in ignored_by({"command": command})] == found


# 6. OpenShift's restricted-v2: no fixed UID.


def test_injected_init_containers_ask_for_no_fixed_uid() -> None:
    text = HEAD + "      containers:\n      - name: train\n        image: registry.example/t:1\n"
    inits = pod(inject(text).stdout)["initContainers"]
    for init in inits:
        context = init["securityContext"]
        assert "runAsUser" not in context and "runAsGroup" not in context, init
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
    assert inits[0]["securityContext"]["runAsNonRoot"] is True  # the injector's USER 65532
    secure = text + ("        securityContext: {runAsNonRoot: true, runAsUser: 1000, "
                     "runAsGroup: 1000}\n")  # fmt: skip
    probe = pod(inject(secure).stdout)["initContainers"][1]
    assert {k: probe["securityContext"].get(k) for k in ("runAsUser", "runAsGroup")} == {
        "runAsUser": 1000, "runAsGroup": 1000}  # runs as its app runs  # fmt: skip


def test_a_container_without_a_name_is_refused_clearly() -> None:
    """Knative lets a Service's container go unnamed; inject names its parts after it."""
    text = ("apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata: {name: s}\n"
            "spec:\n  template:\n    spec:\n      containers:\n"
            "      - image: r.example/s:1\n")  # fmt: skip
    command = [sys.executable, "-m", "tfboot", "inject", "--image", "r.example/i:1", "-"]
    done = subprocess.run(command, input=text, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == "", done.stdout
    assert "a container has no name" in done.stderr and "Traceback" not in done.stderr


ARGO = ("apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata:\n  name: w\n"
        "  annotations: {{tfboot/inject: {value}}}\nspec:\n  templates:\n  - name: fit\n"
        "    container: {{image: 'r.example/t:1'}}\n")  # fmt: skip


@pytest.mark.parametrize("value", ['"false"', '"False"', '"0"', '"no"', '"OFF"'])
def test_the_opt_out_takes_tfboot_s_boolean_spellings(value: str) -> None:
    """Every spelling leaves the object alone, with nothing said of it."""
    text = JOB_ANNOTATED.format(value=value)
    done = tfboot("inject", "--image", IMAGE, "-", stdin=text)
    assert done.returncode == 0 and done.stdout == text and done.stderr == "", done.stderr
    argo = ARGO.format(value=value)
    done = tfboot("inject", "--image", IMAGE, "-", stdin=argo)
    assert (done.returncode, done.stdout, done.stderr) == (0, argo, "")


def test_a_bad_opt_out_is_refused() -> None:
    done = tfboot("inject", "--image", IMAGE, "-", stdin=JOB_ANNOTATED.format(value='"nope"'))
    assert done.returncode == 1 and done.stdout == ""
    assert "annotation tfboot/inject='nope' is invalid: expected true/false" in done.stderr


JOB_ANNOTATED = ("apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: j\n"
                 "  annotations: {{tfboot/inject: {value}}}\nspec:\n  template:\n"
                 "    spec:\n      containers:\n"
                 "      - {{name: train, image: 'r.example/t:1'}}\n")  # fmt: skip


@pytest.mark.parametrize("name", ["x;touch${IFS}/tmp/p", "Train", "a b", "$(id)"])
def test_a_container_name_never_reaches_a_shell_unchecked(name: str) -> None:
    """The probe's ``sh -c`` names the record file after the container."""
    text = ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n"
            f"  - {{name: {json.dumps(name)}, image: 'r.example/t:1'}}\n")  # fmt: skip
    done = tfboot("inject", "--image", IMAGE, "-", stdin=text)
    assert done.returncode == 1 and done.stdout == "", done.stdout
    assert "is not a DNS label" in done.stderr
