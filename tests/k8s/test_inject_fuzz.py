"""Fuzzing ``tfboot inject`` and ``tfboot uninject`` on generated manifests, in process.

Each example is a stream of Kubernetes documents (Pod, Job, CronJob, Deployment, StatefulSet,
DaemonSet, JobSet, PyTorchJob, TFJob, and others beside them) written in varied YAML
surface forms: block and flow styles mixed, every quoting style, comments, anchors and
aliases, merge keys, block scalars (``|``, ``|-``, ``|+``, ``>``, ``>-``, a ``PYTHONPATH``
among them), flow collections with trailing commas, timestamps, several documents and empty
ones, a JSON document, CRLF line endings, a BOM. For each, with and without ``--shm``
(``inject.command.rewrite_text`` with the change functions ``command.run`` builds):

- inject either refuses clearly (``InjectError``, ``DocumentError``, ``yamltext.Unsupported``:
  ``tfboot inject`` prints nothing and exits 1) or gives text that parses to exactly the
  objects intended (``rewrite_text`` checks), with the hook first on the ``PYTHONPATH`` of
  every injected container;
- inject twice is inject once, byte for byte;
- uninject after inject gives the input back byte for byte;
- nothing else escapes.

What was kept and what refused, per surface form, is printed (``pytest -s``).
``TFBOOT_FUZZ_EXAMPLES`` sets how many examples (default 200; the recorded runs 10000)::

    TFBOOT_FUZZ_EXAMPLES=10000 PYTHONPATH=bootstrap:tests .venv/bin/python -m pytest -q \\
        -p no:cacheprovider tests/k8s/test_inject_fuzz.py -s
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tfboot.inject import yamltext
from tfboot.inject.command import rewrite_text
from tfboot.inject.patch import InjectError, Options, inject, uninject
from tfboot.kube import template as t
from tfboot.kube.documents import DocumentError
from tfboot.kube.workloads import templates

pytestmark = [pytest.mark.fuzz, pytest.mark.slow]

EXAMPLES = int(os.environ.get("TFBOOT_FUZZ_EXAMPLES", "200"))
fuzz = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])  # fmt: skip

IMAGE = "registry.example/tfboot-inject:0.1.0"
REFUSALS = (InjectError, DocumentError, yamltext.Unsupported)


def inject_change(opts: Options) -> Any:
    """The change ``command.run`` makes for ``tfboot inject``."""
    return lambda obj, name: inject(obj, opts, name)


def uninject_change(obj: dict[str, Any], name: str) -> list[str]:
    """The change ``command.run`` makes for ``tfboot uninject``."""
    uninject(obj)
    return []


# -- the objects ------------------------------------------------------------------------


class Shared:
    """A value written in two places: anchored and aliased, or written out twice."""

    def __init__(self, value: Any, must: bool = False) -> None:
        self.value, self.must = value, must  # must: anchored (a merge key's base)


class Merge:
    """A mapping that takes ``base`` (a Shared mapping) with ``<<`` and adds ``extra``."""

    def __init__(self, base: Shared, extra: dict[str, Any]) -> None:
        self.base, self.extra = base, extra


class Stamp(str):
    """A timestamp, written plain so that YAML reads it as one."""


NAMES = st.sampled_from(["train", "eval", "worker", "sidecar", "app", "logger"])
PATHS = st.sampled_from(["/srv/lib", "/app:/app/lib", "/opt/code/src", "", "/a b/c", "lib",
                         "/srv/lib:/usr/local/lib/python3.11/site-packages", "/x'y",
                         'q"z'])  # fmt: skip
WORDS = st.sampled_from(["fast", "yes", "no", "true", "1", "0.5", "null", "~", "a: b", "#x",
                         "- x", "[x]", "{y}", "2024-01-01", "'q'", "line one\nline two", "é",
                         " lead", "trail ", "x, y", "@at", "%pct", "*star", "&amp", "!bang",
                         "|bar", ">gt", "?q", "multi word value"])  # fmt: skip


@st.composite
def containers(draw: Any, name: str, shared: dict[str, Shared]) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": f"registry.example/{name}:1.0"}
    if draw(st.booleans()):
        c["command"] = draw(st.sampled_from([["python", "train.py"], ["sh", "-c", "run"],
                                             ["python3", "-u", "-m", "app"]]))  # fmt: skip
    if draw(st.booleans()):
        c["args"] = draw(st.lists(st.sampled_from(["--epochs=3", "-v", "x y", "--lr", "0.1"]),
                                  max_size=3))  # fmt: skip
    env: list[Any] = []
    for _ in range(draw(st.integers(0, 3))):
        env.append({"name": draw(st.sampled_from(["MODE", "LOG_LEVEL", "DATA", "NOTE"])),
                    "value": draw(WORDS)})  # fmt: skip
    if draw(st.integers(0, 2)) == 0:
        env.append({"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}})
    if draw(st.booleans()):
        env.insert(draw(st.integers(0, len(env))), {"name": "PYTHONPATH", "value": draw(PATHS)})
    elif draw(st.integers(0, 30)) == 0:
        ref = {"configMapKeyRef": {"name": "m", "key": "p"}}
        env.append({"name": "PYTHONPATH", "valueFrom": ref})
    if env or draw(st.booleans()):
        if "env" in shared and draw(st.booleans()):
            c["env"] = shared["env"]
        else:
            c["env"] = Shared(env) if draw(st.integers(0, 3)) == 0 else env
            if isinstance(c["env"], Shared):
                shared["env"] = c["env"]
    if draw(st.booleans()):
        memory = draw(st.sampled_from(["1Gi", "512Mi", "64Mi"]))  # --shm: 256Mi, 128Mi, none
        resources = {"limits": {"cpu": draw(st.sampled_from(["1", "500m", 2])),
                                "memory": memory}}  # fmt: skip
        if "resources" in shared and draw(st.booleans()):
            c["resources"] = shared["resources"]
        else:
            shared["resources"] = Shared(resources)
            c["resources"] = shared["resources"]
    if draw(st.booleans()):
        c["volumeMounts"] = draw(st.sampled_from([[], [{"name": "data", "mountPath": "/data"}],
                                                  [{"name": "data", "mountPath": "/data",
                                                    "readOnly": True}],
                                                  [{"name": "data",
                                                    "mountPath": "/dev/shm"}]]))  # fmt: skip
    if draw(st.integers(0, 3)) == 0:
        c["ports"] = [{"containerPort": 8080}]
    return c


@st.composite
def pod_templates(draw: Any, pod: bool = False) -> dict[str, Any]:
    shared: dict[str, Shared] = {}
    names = draw(st.lists(NAMES, min_size=1, max_size=3, unique=True))
    conts: list[Any] = [draw(containers(n, shared)) for n in names]
    if len(conts) > 1 and draw(st.integers(0, 3)) == 0:  # a merge key: <<: *first container
        base = Shared(conts[0], must=True)
        conts[0] = base
        extra = {"name": names[1]}
        for key in draw(st.lists(st.sampled_from(["env", "args", "ports"]), max_size=2)):
            if key in conts[1]:
                extra[key] = conts[1][key]
        conts[1] = Merge(base, extra)
    spec: dict[str, Any] = {"containers": conts}
    if draw(st.booleans()):
        spec["restartPolicy"] = draw(st.sampled_from(["Never", "OnFailure"]))
    if draw(st.booleans()):
        spec["volumes"] = draw(st.sampled_from([[], [{"name": "data", "emptyDir": {}}],
                                                [{"name": "data", "persistentVolumeClaim":
                                                  {"claimName": "d"}}]]))  # fmt: skip
    if draw(st.integers(0, 3)) == 0:
        spec["initContainers"] = [{"name": "setup", "image": "busybox:1.37",
                                   "command": ["sh", "-c", "true"]}]  # fmt: skip
    if draw(st.integers(0, 3)) == 0:
        spec["nodeSelector"] = {"gpu": "true"}
    meta: dict[str, Any] = {}
    if pod:
        meta["name"] = draw(st.sampled_from(["p", "pod-1"]))
    if draw(st.booleans()):
        meta["labels"] = {"app": draw(st.sampled_from(["train", "x"]))}
    annotations: dict[str, Any] = {}
    if draw(st.integers(0, 4)) == 0:
        annotations["note"] = draw(WORDS)
    choice = draw(st.integers(0, 12))
    if choice == 0:
        annotations[t.OPT_OUT] = "false"
    elif choice == 1:
        annotations[t.CHOOSE] = names[0]
    elif choice == 2:
        annotations[t.IMAGE_PYTHONPATH] = draw(st.sampled_from(["none", "/app/lib"]))
    if annotations:
        meta["annotations"] = annotations
    if draw(st.integers(0, 4)) == 0:
        meta["creationTimestamp"] = Stamp(draw(st.sampled_from(
            ["2024-01-01T00:00:00Z", "2026-06-01 10:00:00+00:00", "2024-02-29"])))  # fmt: skip
    out: dict[str, Any] = {}
    if meta or draw(st.booleans()):
        out["metadata"] = meta
    out["spec"] = spec
    return out


def _job(tpl: Any) -> dict[str, Any]:
    return {"backoffLimit": 0, "template": tpl}


@st.composite
def workloads(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from(["Pod", "Job", "CronJob", "Deployment", "StatefulSet",
                                 "DaemonSet", "JobSet", "PyTorchJob", "TFJob"]))  # fmt: skip
    meta: dict[str, Any] = {"name": draw(st.sampled_from(["w", "train-job", "a.b"]))}
    if draw(st.integers(0, 3)) == 0:
        meta["creationTimestamp"] = Stamp("2024-01-01T00:00:00Z")
    if draw(st.integers(0, 5)) == 0:
        meta["annotations"] = {t.OPT_OUT: "false"}
    api = {"Pod": "v1", "Job": "batch/v1", "CronJob": "batch/v1", "JobSet":
           "jobset.x-k8s.io/v1alpha2", "PyTorchJob": "kubeflow.org/v1",
           "TFJob": "kubeflow.org/v1"}.get(kind, "apps/v1")  # fmt: skip
    doc: dict[str, Any] = {"apiVersion": api, "kind": kind, "metadata": meta}
    if kind == "Pod":
        tpl = draw(pod_templates(pod=True))
        doc["spec"] = tpl["spec"]
        if "metadata" in tpl:
            doc["metadata"] = {**meta, **{k: v for k, v in tpl["metadata"].items()
                                          if k != "name"}}  # fmt: skip
    elif kind == "Job":
        doc["spec"] = _job(draw(pod_templates()))
    elif kind == "CronJob":
        doc["spec"] = {
            "schedule": "0 * * * *",
            "jobTemplate": {"spec": _job(draw(pod_templates()))},
        }
    elif kind in ("Deployment", "StatefulSet", "DaemonSet"):
        doc["spec"] = {"selector": {"matchLabels": {"app": "x"}}, "template": draw(pod_templates())}
        if kind != "DaemonSet":
            doc["spec"]["replicas"] = draw(st.integers(0, 3))
    elif kind == "JobSet":
        first = draw(pod_templates())
        second = Shared(first) if draw(st.booleans()) else draw(pod_templates())
        if isinstance(second, Shared):
            first = second  # one Pod template, anchored and aliased
        doc["spec"] = {"replicatedJobs": [
            {"name": "leader", "replicas": 1, "template": {"spec": _job(first)}},
            {"name": "workers", "replicas": 2, "template": {"spec": _job(second)}}]}  # fmt: skip
    else:
        key = "pytorchReplicaSpecs" if kind == "PyTorchJob" else "tfReplicaSpecs"
        doc["spec"] = {key: {"Master" if kind == "PyTorchJob" else "Chief":
                             {"replicas": 1, "template": draw(pod_templates())}}}  # fmt: skip
    return doc


OTHERS = [
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
     "data": {"a": "1", "script": "line one\nline two\n"}},
    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
     "spec": {"ports": [{"port": 80}], "selector": {"app": "x"}}},
]  # fmt: skip


# -- the text -------------------------------------------------------------------------


class Writer:
    """Writes the objects as YAML, drawing each style choice; notes the forms it used."""

    def __init__(self, draw: Any) -> None:
        self.draw = draw
        self.forms: set[str] = set()
        self.at = ""  # the key being written
        self.anchors: dict[int, str | None] = {}
        self.kubectl = draw(st.booleans())  # block lists at their key's column
        self.flow_bias = draw(st.sampled_from([0, 0, 1, 3]))  # of 6: how often flow

    def choose(self, *options: Any) -> Any:
        return self.draw(st.sampled_from(options))

    def comment(self) -> str:
        if self.draw(st.integers(0, 9)) == 0:
            self.forms.add("comments")
            return " # " + self.choose("note", "keep: this", "'q'")
        return ""

    def line_comment(self, pad: int) -> str:
        if self.draw(st.integers(0, 14)) == 0:
            self.forms.add("comments")
            return " " * pad + "# " + self.choose("a comment", "- not an item", "") + "\n"
        return ""

    # values: each returns what follows ``key:`` or ``-``, through its last line break
    def value(self, value: Any, indent: int) -> str:
        if isinstance(value, Shared):
            return self.shared(value, indent)
        if isinstance(value, Merge):
            return "\n" + self.block_mapping(value, indent + 2)
        if isinstance(value, (dict, list)):
            if not value or (
                self._flowable(value) and self.draw(st.integers(0, 5)) < self.flow_bias
            ):
                return " " + self.flow(value) + self.comment() + "\n"
            if isinstance(value, dict):
                return self.comment() + "\n" + self.block_mapping(value, indent + 2)
            column = indent if self.kubectl else indent + 2
            return self.comment() + "\n" + self.block_sequence(value, column)
        return self.scalar(value, indent, block=True) + "\n"

    def shared(self, value: Shared, indent: int) -> str:
        key = id(value)
        if key in self.anchors:
            name = self.anchors[key]
            if name is not None:
                self.forms.add("anchors")
                return f" *{name}" + self.comment() + "\n"
            return self.value(value.value, indent)
        name = f"a{len(self.anchors)}" if value.must or self.draw(st.booleans()) else None
        self.anchors[key] = name
        text = self.value(value.value, indent)
        if name is None:
            return text
        self.forms.add("anchors")
        return f" &{name}" + text if text[0] in " \n#" else f" &{name} " + text

    def _flowable(self, value: Any) -> bool:
        if isinstance(value, dict):
            return all(self._flowable(v) for v in value.values())
        if isinstance(value, list):
            return all(self._flowable(v) for v in value)
        return not isinstance(value, (Shared, Merge, Stamp))

    def flow(self, value: Any) -> str:
        self.forms.add("flow collections")
        trailing = ""
        if value and self.draw(st.integers(0, 3)) == 0:
            self.forms.add("flow trailing comma")
            trailing = ","
        if isinstance(value, dict):
            inner = ", ".join(f"{self.key(k)}: {self.flow_item(v)}" for k, v in value.items())
            return "{" + inner + trailing + "}"
        return "[" + ", ".join(self.flow_item(v) for v in value) + trailing + "]"

    def flow_item(self, value: Any) -> str:
        if isinstance(value, (dict, list)):
            return self.flow(value)
        return self.scalar(value, 0, block=False)

    def key(self, key: str) -> str:
        return key if self.draw(st.integers(0, 9)) else self.choose(f'"{key}"', f"'{key}'")

    def block_mapping(self, value: dict[str, Any] | Merge, indent: int, first: str = "") -> str:
        """Entries at column ``indent``; the first after ``first`` (a list item's dash)."""
        entries = list(value.items()) if isinstance(value, dict) else []
        lines = []
        if isinstance(value, Merge):
            name = self.anchors.get(id(value.base))
            assert name, "a merge key's base is anchored first"
            self.forms.add("merge keys")
            lines.append(f"<<: *{name}\n")
            entries = list(value.extra.items())
        for k, v in entries:
            self.at = k
            lines.append(f"{self.key(k)}:" + self.value(v, indent))
        out = ""
        for i, line in enumerate(lines):
            out += self.line_comment(indent) if i else ""
            out += (first if i == 0 and first else " " * indent) + line
        return out

    def block_sequence(self, value: list[Any], indent: int) -> str:
        out = ""
        for item in value:
            out += self.line_comment(indent)
            dash = " " * indent + "-"
            fresh = isinstance(item, Shared) and id(item) not in self.anchors
            if fresh and isinstance(item.value, dict) and self.draw(st.booleans()):
                name = f"a{len(self.anchors)}"
                self.anchors[id(item)] = name
                self.forms.add("anchors")
                out += f"{dash} &{name}\n" + self.block_mapping(item.value, indent + 2)
                continue
            if isinstance(item, (dict, Merge)) and item and not (
                isinstance(item, dict) and self._flowable(item) and self.draw(st.integers(0, 5))
                < self.flow_bias
            ):  # fmt: skip
                out += self.block_mapping(item, indent + 2, first=dash + " ")
            else:
                out += dash + self.value(item, indent)
        return out

    def scalar(self, value: Any, indent: int, block: bool) -> str:
        if isinstance(value, Stamp):
            self.forms.add("timestamps")
            return " " + value if block else value
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int):
            text = str(value)
        else:
            text = self.string(str(value), indent, block)
        return (" " + text if block and not text.startswith("\n") else text) + (
            self.comment() if block and not text.startswith(("|", ">")) else ""
        )

    def string(self, value: str, indent: int, block: bool) -> str:
        styles = ["double", "single"]
        if self._plain_ok(value, block):
            styles += ["plain"] * 3
        if block and value and value == value.strip() and value.isprintable():
            styles += ["literal", "folded"]
        style = self.draw(st.sampled_from(styles))
        if style == "plain":
            return value
        if style == "single" and "\n" not in value:
            self.forms.add("quoting")
            return "'" + value.replace("'", "''") + "'"
        if style in ("double", "single"):
            self.forms.add("quoting")
            return json.dumps(value, ensure_ascii=self.draw(st.booleans()))
        self.forms.add("block scalars")
        pad = " " * (indent + 2)
        if self.at in ("value", "note", "script"):  # where a final line break may be
            header = self.choose("|", "|-", "|+") if style == "literal" else self.choose(">", ">-")
        else:
            header = "|-" if style == "literal" else ">-"
        if style == "folded" and " " in value and self.draw(st.booleans()):
            body = value.replace(" ", "\n" + pad, 1)  # folded back to one space
        else:
            body = value
        extra = "\n" if header == "|+" and self.draw(st.booleans()) else ""
        comment = self.comment()
        return f"{header}{comment}\n{pad}{body}\n{extra}"[:-1]

    @staticmethod
    def _plain_ok(value: str, block: bool) -> bool:
        if not value or value != value.strip() or "\n" in value:
            return False
        if not block and any(c in value for c in ",[]{}#"):
            return False
        try:
            return yaml.safe_load(f"k: [{value}]" if not block else f"k: {value}") == {
                "k": [value] if not block else value
            }
        except yaml.YAMLError:
            return False

    def document(self, doc: dict[str, Any]) -> str:
        self.anchors = {}
        return self.block_mapping(doc, 0)


@st.composite
def manifests(draw: Any) -> tuple[str, set[str]]:
    writer = Writer(draw)
    docs = draw(st.lists(st.one_of(workloads(), st.sampled_from(OTHERS)), min_size=1, max_size=3))
    if draw(st.integers(0, 9)) == 0 and len(docs) == 1:
        writer.forms.add("JSON")
        text = json.dumps(docs[0], indent=draw(st.sampled_from([None, 2])),
                          default=_plain_json) + "\n"  # fmt: skip
    else:
        parts = []
        for doc in docs:
            if draw(st.integers(0, 7)) == 0:
                writer.forms.add("empty documents")
                parts.append(draw(st.sampled_from(["", "# only a comment\n", "null\n"])))
            parts.append(writer.document(doc))
        if len(parts) > 1:
            writer.forms.add("several documents")
        lead = "---\n" if draw(st.booleans()) else ""
        text = lead + "---\n".join(parts)
        if draw(st.integers(0, 9)) == 0:
            text += "...\n"
    if draw(st.integers(0, 7)) == 0:
        writer.forms.add("CRLF")
        text = text.replace("\n", "\r\n")
    if draw(st.integers(0, 7)) == 0:
        writer.forms.add("BOM")
        text = "\ufeff" + text
    if not writer.forms - {"BOM", "CRLF", "several documents"}:
        writer.forms.add("plain block")
    return text, writer.forms


def _plain_json(value: Any) -> Any:
    if isinstance(value, Shared):
        return value.value
    if isinstance(value, Merge):
        return {**value.base.value, **value.extra}
    raise TypeError(type(value))


# -- the properties -------------------------------------------------------------------

PYTHONPATH_BLOCK = re.compile(r"name: *['\"]?PYTHONPATH['\"]?[^\n]*\n\s*value: *[|>]")


def _hook_first(out: str) -> None:
    """Every container tfboot injected has the hook first on its PYTHONPATH."""
    for doc in yaml.safe_load_all(out.lstrip("\ufeff")):
        for obj in doc.get("items", [doc]) if isinstance(doc, dict) else []:
            for _, template in templates(obj):
                raw = ((template.get("metadata") or {}).get("annotations") or {}).get(t.RECORD)
                if raw is None:
                    continue
                for container in template["spec"]["containers"]:
                    if container["name"] not in json.loads(raw)["containers"]:
                        continue
                    values = [e.get("value") for e in container.get("env") or []
                              if e.get("name") == "PYTHONPATH"]  # fmt: skip
                    assert values, f"no PYTHONPATH in {container['name']}"
                    assert values[-1] == t.HOOK or values[-1].startswith(t.HOOK + ":"), values


def _refusal(exc: Exception) -> str:
    text = str(exc)
    for pattern, label in (("valueFrom", "PYTHONPATH from valueFrom"),
                           ("anchor and its alias", "anchor changed differently"),
                           ("merge key", "merge key"), ("would not read back", "read-back"),
                           ("does not parse again", "read-back"),
                           ("cannot edit in place", "form not editable")):  # fmt: skip
        if pattern in text:
            return label
    return text[:60]


def test_inject_uninject_round_trips() -> None:
    kept: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    started = time.monotonic()

    @fuzz
    @given(manifests(), st.sampled_from(t.MODES), st.booleans())
    def check(manifest: tuple[str, set[str]], mode: str, shm: bool) -> None:
        text, forms = manifest
        if PYTHONPATH_BLOCK.search(text):
            forms = forms | {"block scalar PYTHONPATH"}
        if shm:
            forms = forms | {"--shm"}
        change = inject_change(Options(IMAGE, mode, shm=shm))
        try:
            out, _ = rewrite_text(text, change)
        except REFUSALS as exc:
            refused.update(forms | {"all"})
            reasons[_refusal(exc)] += 1
            return
        if t.SHM_PREFIX in out:
            forms = forms | {"--shm volume added"}
        kept.update(forms | {"all"})
        _hook_first(out)
        assert rewrite_text(out, change)[0] == out, "inject twice is not inject once"
        assert rewrite_text(out, uninject_change)[0] == text, "uninject does not give it back"

    check()
    seconds = time.monotonic() - started
    print(f"\ninject fuzz: {EXAMPLES} examples in {seconds:.1f} s")
    print(f"  {'form':28} {'kept':>6} {'refused':>8}")
    for form in sorted(kept.keys() | refused.keys(), key=lambda f: (f != "all", f)):
        print(f"  {form:28} {kept[form]:>6} {refused[form]:>8}")
    for reason, count in reasons.most_common():
        print(f"  refused: {reason}: {count}")
