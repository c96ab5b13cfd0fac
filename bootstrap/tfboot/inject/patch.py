"""Inject tfboot into one object's Pod templates, or take it out again, on parsed objects.

``inject`` adds the template's parts (``template.py``) and records on the Pod template, in
the ``tfboot/injected`` annotation, what it created and each value it changed, so
``uninject`` gives back exactly what was there. Injecting an injected template with the same
image, mode and containers changes nothing; with others, it is taken out first.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..manifests.dracaps import pod_mps_caps
from ..manifests.workloads import dig, templates
from . import template as t
from .interpreter import ADVICE, ignored_by

LIMIT = "MEMORY_LIMIT_MB"


class InjectError(ValueError):
    """A workload that cannot be injected as asked; nothing is printed then."""


@dataclass(frozen=True)
class Options:
    """What to inject: the injector image, the mode, and, for ``--memory-from-claims``, the
    DRA claims in the inputs (``manifests.claims.read_claims``), else None."""

    image: str
    mode: str = "init"
    claims: Any = None


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    found = dig(obj, ("metadata", "annotations"))
    return found if isinstance(found, Mapping) else {}


def _annotation(doc: Mapping[str, Any], template: Mapping[str, Any], key: str) -> str | None:
    """An annotation of the Pod template, else of the workload."""
    for obj in (template, doc):
        value = _annotations(obj).get(key)
        if value is not None:
            return str(value)
    return None


def inject(doc: dict[str, Any], opts: Options, name: str) -> list[str]:
    """Inject every Pod template of ``doc`` (named ``name`` in messages); the notes to print.
    Raises ``InjectError`` before changing anything when one template cannot be injected."""
    plans = []
    for group, template in templates(doc):
        where = f"{name} {group}".strip()
        if _annotation(doc, template, t.OPT_OUT) == "false":
            continue
        chosen = _chosen(doc, template, where)
        record = _record(template)
        if [record.get(k) for k in ("image", "mode", "containers")] == [opts.image, opts.mode,
                                                                       chosen]:  # fmt: skip
            continue
        plans.append((where, template, chosen))
    for where, template, chosen in plans:
        _check_names(template, chosen, where)
    notes: list[str] = []
    for where, template, chosen in plans:
        if _record(template):
            _uninject_template(template)
        notes += _inject_template(doc, template, chosen, opts, where)
    return notes


def _check_names(template: Mapping[str, Any], chosen: list[str], where: str) -> None:
    """The names tfboot's parts take must be free: a volume or init container of the user's
    by one of them is an error, never taken (those of an earlier injection are tfboot's)."""
    earlier = t.owned([str(c) for c in _record(template).get("containers") or []])
    pod = template.get("spec") or {}
    for key, what in (("volumes", "volume"), ("initContainers", "init container")):
        for item in pod.get(key) or []:
            name = item.get("name") if isinstance(item, Mapping) else None
            if name in t.owned(chosen) and (name not in earlier or not _record(template)):
                raise InjectError(
                    f"{where}: the Pod already has a {what} named {name!r}, a name tfboot "
                    f"inject gives its own parts ({', '.join(sorted(t.owned(chosen)))}): "
                    "rename it, or leave the workload out with the annotation "
                    f'{t.OPT_OUT}: "false"'
                )


def _chosen(doc: Mapping[str, Any], template: Mapping[str, Any], where: str) -> list[str]:
    """The app containers to inject, checked: every one by default, else the annotation's."""
    containers = [c for c in dig(template, ("spec", "containers")) or [] if isinstance(c, dict)]
    names = [str(c.get("name", "")) for c in containers]
    asked = _annotation(doc, template, t.CHOOSE)
    chosen = names if asked is None else [n.strip() for n in asked.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in names]
    if unknown:
        raise InjectError(f"{where}: annotation {t.CHOOSE}={asked!r} names no container "
                          f"{', '.join(unknown)} (containers: {', '.join(names)})")  # fmt: skip
    for container in containers:
        if container.get("name") in chosen:
            for entry in container.get("env") or []:
                if (
                    isinstance(entry, Mapping)
                    and entry.get("name") == "PYTHONPATH"
                    and ("valueFrom" in entry)
                ):
                    raise InjectError(
                        f"{where} container {container['name']}: PYTHONPATH comes from "
                        f"valueFrom ({json.dumps(entry['valueFrom'])}), which tfboot inject "
                        "cannot merge its hook into: give PYTHONPATH as a value, or leave the "
                        f"container out with the annotation {t.CHOOSE}"
                    )
    return chosen


def _record(template: Mapping[str, Any]) -> dict[str, Any]:
    raw = _annotations(template).get(t.RECORD)
    try:
        found = json.loads(str(raw)) if raw is not None else {}
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _list(owner: dict[str, Any], key: str, created: list[str], path: str) -> list[Any]:
    if not isinstance(owner.get(key), list):
        if key not in owner:
            created.append(path)
        owner[key] = []
    return owner[key]


def _inject_template(
    doc: Mapping[str, Any], template: dict[str, Any], chosen: list[str], opts: Options, where: str
) -> list[str]:
    created: list[str] = []
    pythonpaths: dict[str, str | None] = {}
    memory: dict[str, str | None] = {}
    notes: list[str] = []
    pod = template["spec"]
    caps = pod_mps_caps(pod, opts.claims) if opts.claims is not None else {}
    given = _annotation(doc, template, t.IMAGE_PYTHONPATH)
    site_packages = _annotation(doc, template, t.SITE_PACKAGES)
    _list(pod, "volumes", created, "spec.volumes").append(t.volume(opts.mode, opts.image))
    inits: list[dict[str, Any]] = []
    if opts.mode == "init":
        inits.append(t.copy_container(opts.image))
    for container in pod["containers"]:
        name = str(container.get("name", ""))
        if name not in chosen:
            continue
        path = f"containers/{name}"
        mounts = _list(container, "volumeMounts", created, f"{path}/volumeMounts")
        mounts.append(t.app_mount(opts.mode))
        if site_packages:
            mounts.append(t.pth_mount(opts.mode, site_packages))
        env = container.get("env") if isinstance(container.get("env"), list) else []
        if not site_packages:
            env = _list(container, "env", created, f"{path}/env")
        entry = next((e for e in env if _named("PYTHONPATH")(e)), None)
        if site_packages:
            pass  # the .pth in the image's site-packages: PYTHONPATH stays as it is
        elif entry is not None:
            old = str(entry.get("value", ""))
            pythonpaths[name] = old
            entry["value"] = f"{t.HOOK}:{old}" if old else t.HOOK
        else:
            pythonpaths[name] = None
            image_value = "" if given == "none" else given
            env.append({"name": "PYTHONPATH",
                        "value": f"{t.HOOK}:{image_value}" if image_value else t.HOOK})  # fmt: skip
            if given is None and opts.mode == "init":
                env.append({"name": t.CONTAINER_ENV, "value": name})
                inits.append(t.probe_container(container))
                _list(pod, "volumes", created, "spec.volumes").append(t.record_volume(name))
                mounts.append(t.record_mount(name))
            elif given is None:
                notes.append(
                    f"{where} container {name}: the image's own PYTHONPATH (its ENV), if any, is "
                    "replaced by the container's in Kubernetes, and image mode cannot read it: "
                    f'give it in the annotation {t.IMAGE_PYTHONPATH} ("none" if it has none)'
                )
        if name in caps:
            env = _list(container, "env", created, f"{path}/env")
            notes += _carry_memory(env, caps[name], memory, name, where)
        for why in ignored_by(container, bool(site_packages)):
            notes.append(f"{where} container {name}: its command runs Python with {why}, so the "
                         f"hook does not run there: {ADVICE}")  # fmt: skip
    if inits:
        _list(pod, "initContainers", created, "spec.initContainers").extend(inits)
    if not isinstance(template.get("metadata"), dict):
        created.append("metadata")
        template["metadata"] = {}
    annotations = template["metadata"]
    if not isinstance(annotations.get("annotations"), dict):
        created.append("metadata.annotations")
        annotations["annotations"] = {}
    record = {"mode": opts.mode, "image": opts.image, "containers": chosen, "created": created,
              "pythonpath": pythonpaths, **({"memory": memory} if memory else {})}  # fmt: skip
    annotations["annotations"][t.RECORD] = json.dumps(record, separators=(",", ":"))
    return notes


def _carry_memory(env: list[Any], cap: int, memory: dict[str, str | None], name: str,
                  where: str) -> list[str]:  # fmt: skip
    """MEMORY_LIMIT_MB from the container's DRA MPS limit, where it is unset or ``auto``
    (which cannot see that limit); a number of the container's own is left for ``tfboot
    manifests`` to judge."""
    entry = next((e for e in env if _named(LIMIT)(e)), None)
    if entry is None:
        memory[name] = None
        env.append({"name": LIMIT, "value": str(cap)})
    elif entry.get("value") == "auto" and "valueFrom" not in entry:
        memory[name] = "auto"
        entry["value"] = str(cap)
    else:
        return [f"{where} container {name}: {LIMIT} is the container's own; its DRA claim's "
                f"MPS limit allows at most {cap} (tfboot manifests checks it)"]  # fmt: skip
    return []


def uninject(doc: dict[str, Any]) -> None:
    """Take tfboot's parts out of every Pod template of ``doc``."""
    for _, template in templates(doc):
        if _record(template):
            _uninject_template(template)


def _without(owner: dict[str, Any], key: str, drop: Any, created: list[str], path: str) -> None:
    """Remove the items ``drop`` accepts from ``owner[key]``; the key too if inject made it."""
    items = owner.get(key)
    if not isinstance(items, list):
        return
    items[:] = [item for item in items if not drop(item)]
    if not items and path in created:
        del owner[key]


def _named(*names: str) -> Any:
    return lambda item: isinstance(item, Mapping) and item.get("name") in names


def _uninject_template(template: dict[str, Any]) -> None:
    record = _record(template)
    created = [str(c) for c in record.get("created", [])]
    ours = _named(*t.owned([str(c) for c in record.get("containers") or []]))
    pod = template.get("spec") or {}
    _without(pod, "volumes", ours, created, "spec.volumes")
    _without(pod, "initContainers", ours, created, "spec.initContainers")
    for container in pod.get("containers") or []:
        if not isinstance(container, dict):
            continue
        path = f"containers/{container.get('name')}"
        _without(container, "volumeMounts", ours, created, f"{path}/volumeMounts")
        name = container.get("name")
        _without(container, "env", lambda e, n=name: not _env_back(e, n, record),
                 created, f"{path}/env")  # fmt: skip
    metadata = template.get("metadata")
    if isinstance(metadata, dict):
        annotations = metadata.get("annotations")
        if isinstance(annotations, dict):
            annotations.pop(t.RECORD, None)
            if not annotations and "metadata.annotations" in created:
                del metadata["annotations"]
        if not metadata and "metadata" in created:
            del template["metadata"]


def _env_back(entry: Any, name: Any, record: Mapping[str, Any]) -> bool:
    """Put one env entry of container ``name`` back as it was; False for one inject added
    (tfboot's own variable, a PYTHONPATH or MEMORY_LIMIT_MB the container did not have)."""
    if not isinstance(entry, dict):
        return True
    if entry.get("name") == t.CONTAINER_ENV:
        return False
    olds = {"PYTHONPATH": record.get("pythonpath") or {}, LIMIT: record.get("memory") or {}}
    variable = entry.get("name")
    if variable not in olds:
        return True
    value = str(entry.get("value", ""))
    if name in olds[variable]:
        old = olds[variable][name]
    elif variable == "PYTHONPATH" and (value == t.HOOK or value.startswith(t.HOOK + ":")):
        old = value[len(t.HOOK) + 1 :] or None  # no record: without the hook's entry
    else:
        return True
    if old is None:
        return False
    entry["value"] = old
    return True
