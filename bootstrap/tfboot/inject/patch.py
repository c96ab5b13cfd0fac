"""Inject tfboot into one object's Pod templates, or take it out again, on parsed objects.

``inject`` adds the template's parts (``template.py``) and records on the Pod template, in
the ``tfboot/injected`` annotation, what it created and each value it changed, so
``uninject`` gives back exactly what was there. Injecting an injected template with the same
image, mode and containers changes nothing; with others, it is taken out first.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..kube import template as t
from ..kube.dracaps import pod_mps_caps
from ..kube.interpreter import ADVICE, ignored_by
from ..kube.shm import RUNTIME, dev_shm
from ..kube.workloads import dig, gpu_grant, templates
from ..settings import BOOL_ACCEPTED, BOOL_WORDS, POD_MEMORY

LIMIT = "MEMORY_LIMIT_MB"
# What inject gives a container under a Pod-level memory limit (``_pod_memory``).
POD_MEMORY_ENTRY = {"name": POD_MEMORY, "valueFrom": {"resourceFieldRef": {
    "resource": "limits.memory", "divisor": "1Mi"}}}  # fmt: skip
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class InjectError(ValueError):
    """A workload that cannot be injected as asked; nothing is printed then."""


@dataclass(frozen=True)
class Options:
    """What to inject: the injector image, the mode, and, for ``--memory-from-claims``, the
    DRA claims in the inputs (``kube.claims.read_claims``), else None."""

    image: str
    mode: str = "init"
    claims: Any = None
    shm: bool = False  # a memory-backed /dev/shm, sized from limits.memory, where none is


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


def opted_out(doc: Mapping[str, Any], template: Mapping[str, Any], where: str) -> bool:
    """``tfboot/inject`` on the Pod template, else the workload, read with tfboot's own
    boolean spellings (``false``, ``0``, ``no``, ``off``, any case); another value is an
    error, never taken for yes."""
    value = _annotation(doc, template, t.OPT_OUT)
    if value is None:
        return False
    word = value.strip().lower()
    if word not in BOOL_WORDS:
        raise InjectError(f"{where}: annotation {t.OPT_OUT}={value!r} is invalid: "
                          f"{BOOL_ACCEPTED}")  # fmt: skip
    return not BOOL_WORDS[word]


def inject(doc: dict[str, Any], opts: Options, name: str) -> list[str]:
    """Inject every Pod template of ``doc`` (named ``name`` in messages); the notes to print.
    Raises ``InjectError`` before changing anything when one template cannot be injected."""
    plans = []
    for group, template in templates(doc):
        where = f"{name} {group}".strip()
        if opted_out(doc, template, where):
            continue
        chosen = _chosen(doc, template, where)
        asked = _asked(doc, template, chosen, opts)
        if _record(template).get("asked") == asked:
            continue
        plans.append((where, template, chosen, asked))
    for where, template, chosen, _ in plans:
        _check_names(template, chosen, where)
    notes: list[str] = []
    for where, template, chosen, asked in plans:
        if _record(template):
            notes += _uninject_template(template, where)
        notes += _inject_template(doc, template, chosen, opts, where, asked)
    return notes


def _asked(doc: Mapping[str, Any], template: Mapping[str, Any], chosen: list[str],
           opts: Options) -> str:  # fmt: skip
    """A digest of all tfboot's parts are made from: the injector image, the mode, the
    containers, the annotations read, and each chosen container's probe (the app's image,
    envFrom, pull policy, user). Equal to the record's: injected as asked already."""
    apps = [t.probe_container(c) for c in dig(template, ("spec", "containers")) or []
            if isinstance(c, dict) and c.get("name") in chosen]  # fmt: skip
    given = [_annotation(doc, template, key) for key in (t.IMAGE_PYTHONPATH, t.SITE_PACKAGES)]
    shm = [_shm_asked(template, chosen)] if opts.shm else []
    text = json.dumps([opts.image, opts.mode, chosen, given, apps, *shm], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _shm_asked(template: Mapping[str, Any], chosen: list[str]) -> list[Any]:
    """What ``--shm``'s parts are made from: the Pod's hostIPC, and each chosen container's
    limits.memory and the volumes of its own mounted at /dev/shm (tfboot's left out, so an
    injected template gives what its input gave)."""
    pod = template.get("spec") or {}
    ours = t.owned(chosen)
    found: list[Any] = ["shm", pod.get("hostIPC")]
    for container in pod.get("containers") or []:
        if isinstance(container, dict) and container.get("name") in chosen:
            own = dev_shm(container, pod).volume
            found.append([container["name"], str(_memory_given(container)),
                          None if own in ours else own])  # fmt: skip
    return found


def _memory_given(container: Mapping[str, Any]) -> Any:
    """The container's limits.memory as written (None: none, or resources of another shape)."""
    limits = dig(container, ("resources", "limits"))
    return limits.get("memory") if isinstance(limits, Mapping) else None


def _check_names(template: Mapping[str, Any], chosen: list[str], where: str) -> None:
    """The names tfboot's parts take must be free: a volume or init container of the user's
    by one of them is an error, never taken (those of an earlier injection are tfboot's)."""
    probes = {t.probe_name(c) for c in chosen}
    if len(probes) < len(set(chosen)):
        raise InjectError(f"{where}: the containers {', '.join(chosen)} would give two of "
                          "tfboot's probes one name: rename one, or choose the containers with "
                          f"the annotation {t.CHOOSE}")  # fmt: skip
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
    if "" in names:
        raise InjectError(f"{where}: a container has no name (Knative names one "
                          "user-container when it runs): give it a name, which inject's parts "
                          "are named after")  # fmt: skip
    # A name reaches a probe's shell command and file names: only what Kubernetes accepts.
    odd = [n for n in names if not DNS_LABEL.fullmatch(n)]
    if odd:
        raise InjectError(f"{where}: container name {odd[0]!r} is not a DNS label (lower-case "
                          "letters, digits and '-', at most 63), which Kubernetes requires "
                          "and inject names its parts after")  # fmt: skip
    asked = _annotation(doc, template, t.CHOOSE)
    chosen = names if asked is None else [n.strip() for n in asked.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in names]
    if unknown:
        raise InjectError(f"{where}: annotation {t.CHOOSE}={asked!r} names no container "
                          f"{', '.join(unknown)} (containers: {', '.join(names)})")  # fmt: skip
    for container in containers:
        if container.get("name") in chosen:
            entry = _last(container.get("env"), "PYTHONPATH")
            if entry is not None and "valueFrom" in entry:
                raise InjectError(
                    f"{where} container {container['name']}: PYTHONPATH comes from "
                    f"valueFrom ({json.dumps(entry['valueFrom'])}), which tfboot inject "
                    "cannot merge its hook into: give PYTHONPATH as a value, or leave the "
                    f"container out with the annotation {t.CHOOSE}"
                )
    return chosen


def _last(env: Any, variable: str) -> dict[str, Any] | None:
    """The entry of ``variable`` the container gets: the kubelet takes the last of a name
    given twice (as kustomize and Helm merges leave it)."""
    found = [e for e in env or [] if isinstance(e, dict) and e.get("name") == variable]
    return found[-1] if found else None


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
    doc: Mapping[str, Any], template: dict[str, Any], chosen: list[str], opts: Options,
    where: str, asked: str,
) -> list[str]:  # fmt: skip
    created: list[str] = []
    pythonpaths: dict[str, str | None] = {}
    memory: dict[str, str | None] = {}
    wrote: dict[str, dict[str, str]] = {}
    notes: list[str] = []
    pod_memory: list[str] = []
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
        values = wrote.setdefault(name, {})
        if site_packages:
            mounts.append(t.pth_mount(opts.mode, site_packages))  # PYTHONPATH stays as it is
            unknown = False
        else:
            env = _list(container, "env", created, f"{path}/env")
            pythonpaths[name] = _merge_hook(env, given, values)
            unknown = pythonpaths[name] is None and given is None  # the image's own: probe
        if unknown and opts.mode == "init":
            env.append({"name": t.CONTAINER_ENV, "value": name})
            values[t.CONTAINER_ENV] = name
            inits.append(t.probe_container(container))
            _list(pod, "volumes", created, "spec.volumes").append(t.record_volume(name))
            mounts.append(t.record_mount(name))
        elif unknown:
            notes.append(
                f"{where} container {name}: the image's own PYTHONPATH (its ENV), if any, is "
                "replaced by the container's in Kubernetes, and image mode cannot read it: "
                f'give it in the annotation {t.IMAGE_PYTHONPATH} ("none" if it has none)'
            )
        if name in caps:
            env = _list(container, "env", created, f"{path}/env")
            notes += _carry_memory(env, caps[name], memory, values, name, where)
        if _pod_memory(pod, container, created, path):
            pod_memory.append(name)
            notes.append(f"{where} container {name}: its memory limit is the Pod's "
                         f"(spec.resources), shared with its other containers: {POD_MEMORY} "
                         "from the Downward API's limits.memory says so to tfboot, and is the "
                         "limit where the Pod's cgroup is hidden")  # fmt: skip
        for why in ignored_by(container, bool(site_packages)):
            notes.append(f"{where} container {name}: its command runs Python with {why}, so the "
                         f"hook does not run there: {ADVICE}")  # fmt: skip
    if opts.shm:
        notes += _add_shm(pod, chosen, created, where)
    if inits:
        _list(pod, "initContainers", created, "spec.initContainers").extend(inits)
    if not isinstance(template.get("metadata"), dict):
        created.append("metadata")
        template["metadata"] = {}
    annotations = template["metadata"]
    if not isinstance(annotations.get("annotations"), dict):
        created.append("metadata.annotations")
        annotations["annotations"] = {}
    record = {"mode": opts.mode, "image": opts.image, "containers": chosen, "asked": asked,
              "created": created, "pythonpath": pythonpaths,
              "wrote": {n: v for n, v in wrote.items() if v},
              **({"memory": memory} if memory else {}),
              **({"pod_memory": pod_memory} if pod_memory else {})}  # fmt: skip
    annotations["annotations"][t.RECORD] = json.dumps(record, separators=(",", ":"))
    return notes


def _add_shm(pod: dict[str, Any], chosen: list[str], created: list[str], where: str) -> list[str]:
    """``--shm``: each chosen container that gets the runtime's 64 MiB /dev/shm, and whose
    limits.memory allows more, gets its own memory-backed one of a quarter of that limit (its
    pages count against it, so one shared with a larger container could fill it); what was
    done, and why a container got none, as notes. One mounting a /dev/shm of its own keeps it."""
    from ..kube.documents import quantity
    from ..node.nccl import SHM_MIN_MIB
    from ..node.shm import DOCKER_DEFAULT_MIB, MIB, memory_volume, size_under

    notes: list[str] = []
    if pod.get("hostIPC") is True:
        return [f"{where}: /dev/shm not added: the Pod has hostIPC: true, so its containers "
                "have the node's /dev/shm (--shm)"]  # fmt: skip
    for container in pod["containers"]:
        name = str(container.get("name")) if isinstance(container, dict) else ""
        if name not in chosen or dev_shm(container, pod).kind != RUNTIME:
            continue
        here = f"{where} container {name}"
        given = _memory_given(container)
        limit = quantity(given)
        size = size_under(limit) if limit else None
        nccl = _nccl(container)
        if nccl and limit and limit >= 2 * SHM_MIN_MIB * MIB:  # NCCL's least, within half
            size = max(size or 0, SHM_MIN_MIB)
        if not limit:
            has = "no limits.memory" if given is None else f"limits.memory {given!r}, not a size"
            notes.append(f"{here}: /dev/shm not added: its size is taken from limits.memory, "
                         f"and it has {has}; it keeps the runtime's {DOCKER_DEFAULT_MIB} MiB "
                         "(--shm)")  # fmt: skip
            continue
        if size is None:
            notes.append(f"{here}: /dev/shm not added: a quarter of its limits.memory ({given}) "
                         f"is not more than the runtime's {DOCKER_DEFAULT_MIB} MiB, which it "
                         "keeps (--shm)")  # fmt: skip
            continue
        _list(pod, "volumes", created, "spec.volumes").append(t.shm_volume(name, size))
        path = f"containers/{name}"
        _list(container, "volumeMounts", created, f"{path}/volumeMounts").append(t.shm_mount(name))
        rounded = "" if size * 4 * MIB == limit else ", rounded down to whole 64 MiB"
        how = f"a quarter of its limits.memory ({given}){rounded}"
        if size == SHM_MIN_MIB and size * 4 * MIB > limit:
            how = f"the {SHM_MIN_MIB} MiB NCCL needs ({nccl}), within its limits.memory ({given})"
        notes.append(f"{here}: added {memory_volume(f'{size}Mi')}, its own (volume "
                     f"{t.shm_name(name)}): {how}, which its pages count against (--shm; "
                     "uninject takes it out)")  # fmt: skip
    return notes


def _nccl(container: Mapping[str, Any]) -> str:
    """Why NCCL will run in ``container`` ("": it will not), from its limits and its literal
    env: several GPUs, or a GPU under ``DISTRIBUTED``."""
    limits = dig(container, ("resources", "limits"))
    gpus = gpu_grant(limits if isinstance(limits, dict) else {}).count
    env = {str(e.get("name")): str(e.get("value", "")) for e in container.get("env") or []
           if isinstance(e, Mapping)}  # fmt: skip
    mode = env.get("DISTRIBUTED", "").strip().lower()
    if gpus > 1:
        return f"{gpus} GPUs"
    return f"a GPU under DISTRIBUTED={mode}" if gpus and mode not in ("", "off") else ""


def _pod_memory(pod: Mapping[str, Any], container: dict[str, Any], created: list[str],
                path: str) -> bool:  # fmt: skip
    """``POD_MEMORY`` from the Downward API's ``limits.memory`` (the Pod's, where the
    container has none of its own) for a container under a Pod-level memory limit that
    does not set it itself; whether it was added."""
    pod_limits = dig(pod, ("resources", "limits"))  # of any shape: inject never raises on it
    if _memory_given(container) is not None or not isinstance(pod_limits, Mapping) or \
            "memory" not in pod_limits:  # fmt: skip
        return False
    env = _list(container, "env", created, f"{path}/env")
    if _last(env, POD_MEMORY) is not None:
        return False
    env.append(dict(POD_MEMORY_ENTRY))
    return True


def _merge_hook(env: list[Any], given: str | None, values: dict[str, str]) -> str | None:
    """The hook first on the PYTHONPATH the container gets (its last entry), before the
    container's own value, else the image's as given; the value it had (None: none)."""
    entry = _last(env, "PYTHONPATH")
    value = None if entry is None else entry.get("value")
    own = None if entry is None else ("" if value is None else str(value))  # null is empty
    if entry is None:
        entry = {"name": "PYTHONPATH"}
        env.append(entry)
    merged = own if own is not None else ("" if given == "none" else given)
    entry["value"] = values["PYTHONPATH"] = f"{t.HOOK}:{merged}" if merged else t.HOOK
    return own


def _carry_memory(env: list[Any], cap: int, memory: dict[str, str | None],
                  values: dict[str, str], name: str, where: str) -> list[str]:  # fmt: skip
    """MEMORY_LIMIT_MB from the container's DRA MPS limit, where it is unset or ``auto``
    (which cannot see that limit); a number of the container's own is left for ``tfboot
    manifests`` to judge. The entry the container gets is the last of that name."""
    entry = _last(env, LIMIT)
    if entry is None:
        memory[name] = None
        env.append({"name": LIMIT, "value": str(cap)})
    elif entry.get("value") == "auto" and "valueFrom" not in entry:
        memory[name] = "auto"
        entry["value"] = str(cap)
    else:
        return [f"{where} container {name}: {LIMIT} is the container's own; its DRA claim's "
                f"MPS limit allows at most {cap} (tfboot manifests checks it)"]  # fmt: skip
    values[LIMIT] = str(cap)
    return []


def uninject(doc: dict[str, Any], name: str = "") -> list[str]:
    """Take tfboot's parts out of every Pod template of ``doc`` (named ``name`` in notes);
    the notes: each value the user changed after inject, kept, and what was not undone."""
    notes: list[str] = []
    for group, template in templates(doc):
        if _record(template):
            notes += _uninject_template(template, f"{name} {group}".strip())
    return notes


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


def _uninject_template(template: dict[str, Any], where: str) -> list[str]:
    record = _record(template)
    created = [str(c) for c in record.get("created", [])]
    ours = _named(*t.owned([str(c) for c in record.get("containers") or []]))
    pod = template.get("spec") or {}
    _without(pod, "volumes", ours, created, "spec.volumes")
    _without(pod, "initContainers", ours, created, "spec.initContainers")
    notes: list[str] = []
    for container in pod.get("containers") or []:
        if not isinstance(container, dict):
            continue
        path = f"containers/{container.get('name')}"
        _without(container, "volumeMounts", ours, created, f"{path}/volumeMounts")
        drop = _env_back(container, record, where, notes)
        _without(container, "env", lambda e, d=drop: any(e is x for x in d), created,
                 f"{path}/env")  # fmt: skip
    metadata = template.get("metadata")
    if isinstance(metadata, dict):
        annotations = metadata.get("annotations")
        if isinstance(annotations, dict):
            annotations.pop(t.RECORD, None)
            if not annotations and "metadata.annotations" in created:
                del metadata["annotations"]
        if not metadata and "metadata" in created:
            del template["metadata"]
    return notes


def _env_back(container: dict[str, Any], record: Mapping[str, Any], where: str,
              notes: list[str]) -> list[Any]:  # fmt: skip
    """Put the container's env back as it was before inject, where it is still as inject
    left it; a value the user changed since is kept (a note says so). The entries to drop:
    those inject added."""
    name = str(container.get("name"))
    env = container.get("env") if isinstance(container.get("env"), list) else []
    wrote = (record.get("wrote") or {}).get(name) or {}
    drop = [e for e in [_last(env, t.CONTAINER_ENV)] if e is not None and
            e.get("value") == name and name in (record.get("containers") or [])]  # fmt: skip
    olds = record.get("pythonpath") or {}
    entries = [e for e in env if isinstance(e, dict) and e.get("name") == "PYTHONPATH"]
    hooked = [e for e in entries if t.HOOK in str(e.get("value", "")).split(":")]
    here = f"{where} container {name}"
    if name in olds:  # the hook's entry (an older inject's may not be the last), else the last
        entry = (hooked or entries or [None])[-1]
        drop += _pythonpath_back(entry, olds[name], wrote.get("PYTHONPATH"), here, notes)
    elif hooked:  # no record of it: the hook taken out
        drop += _pythonpath_back(hooked[-1], _unhooked(hooked[-1]), None, here, notes)
    entry = _last(env, POD_MEMORY)
    if name in (record.get("pod_memory") or []) and entry == POD_MEMORY_ENTRY:
        drop.append(entry)  # as inject wrote it (a user's change stays)
    memory = record.get("memory") or {}
    if name in memory:
        drop += _memory_back(_last(env, LIMIT), memory[name], wrote.get(LIMIT), here, notes)
    return drop


def _unhooked(entry: Mapping[str, Any]) -> str | None:
    """A PYTHONPATH value without the hook's own entry; None for nothing left."""
    parts = str(entry.get("value", "")).split(":")
    if t.HOOK in parts:
        parts.remove(t.HOOK)
    return ":".join(parts) or None


def _pythonpath_back(entry: dict[str, Any] | None, old: str | None, wrote: str | None,
                     where: str, notes: list[str]) -> list[Any]:  # fmt: skip
    """PYTHONPATH as before inject (``old``; None: it had none), or, where the user changed
    what inject wrote since, as it now is without the hook's entry, with a note."""
    before = "it had none" if old is None else f"it was {old!r}"
    if entry is None or "valueFrom" in entry:
        how = "removed" if entry is None else "set from valueFrom"
        if entry is not None or old is not None:
            notes.append(f"{where}: PYTHONPATH was {how} after tfboot inject, so it is kept "
                         f"as it is (before inject {before})")  # fmt: skip
        return []
    kept = _unhooked(entry)
    if wrote is not None and entry.get("value") != wrote and kept != old:
        entry["value"] = kept or ""
        notes.append(f"{where}: PYTHONPATH was changed after tfboot inject, so only {t.HOOK} "
                     f"was taken out, leaving {kept or ''!r} (before inject {before}): check "
                     "it is as you want")  # fmt: skip
        return []
    if old is None:
        return [entry]
    entry["value"] = old
    return []


def _memory_back(entry: dict[str, Any] | None, old: str | None, wrote: str | None,
                 where: str, notes: list[str]) -> list[Any]:  # fmt: skip
    """MEMORY_LIMIT_MB as before inject (``old``: ``auto``, or None for unset), unless the
    user changed what inject wrote: then it is kept, with a note."""
    if entry is None:
        return []  # the user removed it: nothing to give back over their change
    if wrote is None or (entry.get("value") == wrote and "valueFrom" not in entry):
        if old is None:
            return [entry]
        entry["value"] = old
        return []
    present = entry.get("value", "from valueFrom")
    notes.append(f"{where}: {LIMIT} was changed after tfboot inject (now {present!r}; inject "
                 f"wrote {wrote!r}), so it is kept (before inject it was "
                 f"{'unset' if old is None else repr(old)})")  # fmt: skip
    return []
