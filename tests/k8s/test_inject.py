"""``tfboot inject`` and ``uninject`` on manifests, through the command line: every
Pod-template kind the checker knows, comments and other documents kept byte for byte,
``uninject`` giving back exactly the input, twice equal to once, ``PYTHONPATH`` merged and a
``valueFrom`` one refused with nothing printed, the opt-out and container-choice
annotations, and notes for commands that keep the hook out. Every manifest in the
repository (the overlays rendered by ``kubectl kustomize``, the examples, the checker's test
inputs) round-trips, and the injected overlays pass ``tfboot manifests`` with no finding
that was not there before.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kustomize import K8S

TESTDATA = Path(__file__).resolve().parent / "testdata"
IMAGE = "registry.example/tfboot-inject:0.1.0"
KUBECTL_STYLE = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: serve
spec:
  template:
    metadata:
      labels: {app: serve}
    spec:
      containers:
      - name: app
        image: registry.example/serve:2.0
        args: ["--port", "8080"]
        env:
        - name: PYTHONPATH
          value: "/srv/lib:/srv/more"   # the team's own
"""


def tfboot(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfboot", *args], input=stdin, text=True,
                          capture_output=True, timeout=120)  # fmt: skip


def inject(text: str, *extra: str) -> str:
    done = tfboot("inject", "--image", IMAGE, *extra, "-", stdin=text)
    assert done.returncode == 0, done.stderr
    return done.stdout


def pods(text: str) -> list[dict]:
    from tfboot.kube.workloads import pod_templates

    return [pod for d in yaml.safe_load_all(text) if d for _, pod in pod_templates(d)]


def env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env") or []}


def test_kubectl_style_keeps_its_style_and_merges_pythonpath() -> None:
    out = inject(KUBECTL_STYLE)
    assert out.startswith(KUBECTL_STYLE.split("    spec:")[0])  # untouched before it adds
    assert '          value: "/tfboot/hook:/srv/lib:/srv/more"   # the team\'s own\n' in out
    assert "\n      - name: tfboot-inject\n" in out  # kubectl's unindented lists, as around it
    (pod,) = pods(out)
    assert env(pod["containers"][0])["PYTHONPATH"] == "/tfboot/hook:/srv/lib:/srv/more"
    # A PYTHONPATH the container declares is what the process gets: no probe is needed.
    assert [c["name"] for c in pod["initContainers"]] == ["tfboot-inject"]
    assert tfboot("uninject", "-", stdin=out).stdout == KUBECTL_STYLE
    assert inject(out) == out


@pytest.mark.slow
def test_every_manifest_here_round_trips(rendered: dict[str, str]) -> None:
    sources = {f"overlay {n}": t for n, t in rendered.items()}
    for path in [*sorted((K8S / "examples").glob("*.yaml")), *sorted(TESTDATA.rglob("*.yaml"))]:
        sources[str(path.relative_to(TESTDATA.parent.parent.parent))] = path.read_text()
    changed = 0
    for name, text in sources.items():
        try:
            if not any(pods(text)) or "tfboot/inject" in text:
                continue
        except (yaml.YAMLError, AttributeError, TypeError):  # the checker's unreadable inputs
            continue
        out = inject(text)
        changed += out != text
        assert inject(out) == out, name
        assert tfboot("uninject", "-", stdin=out).stdout == text, name
        for pod in pods(out):
            assert "tfboot" in [v["name"] for v in pod["volumes"]], name
            for container in pod["containers"]:
                assert env(container)["PYTHONPATH"].split(":")[0] == "/tfboot/hook", name
    assert changed >= 10


def test_injected_overlays_add_no_finding(rendered: dict[str, str]) -> None:
    for name, text in rendered.items():
        before = json.loads(tfboot("manifests", "--json", "-", stdin=text).stdout)
        after = json.loads(tfboot("manifests", "--json", "-", stdin=inject(text)).stdout)
        key = lambda f: (f["rule"], f["container"])  # noqa: E731
        assert sorted(map(key, after["findings"])) == sorted(map(key, before["findings"])), name


def test_json_input_stays_json() -> None:
    doc = yaml.safe_load(KUBECTL_STYLE)
    text = json.dumps(doc, indent=4) + "\n"
    out = inject(text)
    assert json.loads(out)["spec"]["template"]["spec"]["volumes"][0]["name"] == "tfboot"
    assert tfboot("uninject", "-", stdin=out).stdout == text


def test_value_from_is_refused_and_nothing_is_printed() -> None:
    text = KUBECTL_STYLE.replace(
        'value: "/srv/lib:/srv/more"   # the team\'s own',
        "valueFrom: {configMapKeyRef: {name: paths, key: pythonpath}}",
    )
    other = KUBECTL_STYLE.replace("name: serve", "name: other")
    done = tfboot("inject", "--image", IMAGE, "-", stdin=other + "---\n" + text)
    assert done.returncode == 1 and done.stdout == ""
    assert "Deployment/serve container app: PYTHONPATH comes from valueFrom" in done.stderr
    assert "configMapKeyRef" in done.stderr and "nothing was printed" in done.stderr


def test_opt_out_and_container_choice() -> None:
    out_out = KUBECTL_STYLE.replace("  name: serve\n", '  name: serve\n  annotations:\n'
                                    '    tfboot/inject: "false"\n')  # fmt: skip
    assert inject(out_out) == out_out
    two = KUBECTL_STYLE + "      - name: proxy\n        image: registry.example/proxy:1.0\n"
    (pod,) = pods(inject(two))
    assert "PYTHONPATH" in env(pod["containers"][1])  # every container by default
    chosen = two.replace("      labels: {app: serve}\n", "      labels: {app: serve}\n"
                         "      annotations: {tfboot/inject-containers: app}\n")  # fmt: skip
    (pod,) = pods(inject(chosen))
    assert "PYTHONPATH" not in env(pod["containers"][1])
    assert "volumeMounts" not in pod["containers"][1]
    # Choosing again on an injected manifest takes the injection out of the other container.
    rechosen = inject(two).replace(
        "  name: serve\n", "  name: serve\n  annotations: {tfboot/inject-containers: app}\n", 1
    )
    (pod,) = pods(inject(rechosen))
    assert "PYTHONPATH" in env(pod["containers"][0])
    assert "PYTHONPATH" not in env(pod["containers"][1])
    wrong = chosen.replace("tfboot/inject-containers: app", "tfboot/inject-containers: trainer")
    done = tfboot("inject", "--image", IMAGE, "-", stdin=wrong)
    assert done.returncode == 1 and "names no container trainer" in done.stderr


def test_the_image_s_own_pythonpath_is_probed_or_given() -> None:
    text = KUBECTL_STYLE.split("        env:")[0]
    (pod,) = pods(inject(text))
    probe = pod["initContainers"][1]
    assert probe["name"] == "tfboot-env-app" and probe["image"] == "registry.example/serve:2.0"
    assert env(pod["containers"][0]) == {"PYTHONPATH": "/tfboot/hook", "TFBOOT_INJECTED": "app"}
    given = text.replace("      labels: {app: serve}\n", "      labels: {app: serve}\n"
                         "      annotations: {tfboot/image-pythonpath: /app/lib}\n")  # fmt: skip
    (pod,) = pods(inject(given))
    assert [c["name"] for c in pod["initContainers"]] == ["tfboot-inject"]
    assert env(pod["containers"][0]) == {"PYTHONPATH": "/tfboot/hook:/app/lib"}
    done = tfboot("inject", "--image", IMAGE, "--mode", "image", "-", stdin=text)
    assert "image mode cannot read it" in done.stderr


@pytest.mark.parametrize("command", [["python", "-I", "x.py"], ["python3.11", "-BE", "-m", "x"],
                                     ["sh", "-c", "exec python3 -S train.py"]])  # fmt: skip
def test_commands_that_keep_the_hook_out_are_named(command: list[str]) -> None:
    text = KUBECTL_STYLE.replace('args: ["--port", "8080"]', f"command: {json.dumps(command)}")
    done = tfboot("inject", "--image", IMAGE, "-", stdin=text)
    assert done.returncode == 0 and "container app: its command runs Python with -" in done.stderr
    found = json.loads(tfboot("manifests", "--json", "-", stdin=done.stdout).stdout)
    assert "inject-ignored" in {f["rule"] for f in found["findings"]}


def test_a_broken_injection_is_a_finding() -> None:
    out = inject(KUBECTL_STYLE)
    doc = yaml.safe_load(out)
    doc["spec"]["template"]["spec"]["initContainers"] = []
    doc["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] = "/srv/lib:/tfboot/hook"
    found = json.loads(tfboot("manifests", "--json", "-", stdin=yaml.safe_dump(doc)).stdout)
    assert {"inject-incomplete", "inject-pythonpath"} <= {f["rule"] for f in found["findings"]}


def test_unreadable_input() -> None:
    done = tfboot("inject", "--image", IMAGE, "/nonexistent.yaml")
    assert done.returncode == 2 and "cannot read /nonexistent.yaml" in done.stderr
    done = tfboot("inject", "--image", IMAGE, "-", stdin="a: [1, 2\n")
    assert done.returncode == 1 and "Traceback" not in done.stderr and done.stdout == ""


DRA_POD = (TESTDATA / "dra" / "pod.yaml").read_text()  # MEMORY_LIMIT_MB=auto, a claim


def test_memory_from_a_dra_claim_is_carried_and_taken_back() -> None:
    """NVIDIA's DRA driver keeps the MPS limit on its daemon: ``auto`` finds nothing in the
    container, so inject writes the claim's limit minus TensorFlow's 1536 MiB of headroom."""
    claims = (TESTDATA / "dra" / "claims.yaml").read_text()
    text = DRA_POD + "---\n" + claims
    out = inject(text, "--memory-from-claims")
    (pod,) = pods(out)
    assert env(pod["containers"][0])["MEMORY_LIMIT_MB"] == str(10 * 1024 - 1536)
    assert tfboot("uninject", "-", stdin=out).stdout == text
    assert env(pods(inject(text))[0]["containers"][0])["MEMORY_LIMIT_MB"] == "auto"
    unset = text.replace("      env:\n        - name: MEMORY_LIMIT_MB\n          value: auto\n", "")
    out = inject(unset, "--memory-from-claims")
    assert env(pods(out)[0]["containers"][0])["MEMORY_LIMIT_MB"] == "8704"
    assert tfboot("uninject", "-", stdin=out).stdout == unset
    own = text.replace("value: auto", 'value: "12000"')
    done = tfboot("inject", "--image", IMAGE, "--memory-from-claims", "-", stdin=own)
    assert "MEMORY_LIMIT_MB is the container's own" in done.stderr and "at most 8704" in done.stderr
