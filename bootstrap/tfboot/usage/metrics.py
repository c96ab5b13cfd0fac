"""A usage record as Prometheus metrics: a textfile for node-exporter, a push to a Pushgateway.

Uses ``prometheus_client`` (``pip install 'tfboot[metrics]'``), imported only when a record
is exported, never at start-up or at ``import tensorflow``. Names follow Prometheus's
conventions: base units (``_bytes``, ``_seconds``), ``_ratio`` for shares, ``_total`` for
counts; the suggestion is named as kube-state-metrics names a container's resources
(``resource``, ``unit`` labels). Every series carries the record's labels (``job``,
``pod``, ``namespace``, ...); a push groups by ``job`` and the job's identity
(``identity``: the Pod, its namespace and task, the run), and so does the textfile's name.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Any

from ..cluster import RUNS
from .measure import MIB

PACKAGE = "prometheus_client"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
MAX_NAME = 200  # of a textfile's name, well inside a file system's 255 bytes
_QUANTITY = re.compile(r"^([0-9.]+)(m|Mi)?$")


def registry(record: dict[str, Any], omit: tuple[str, ...] = (),
             add: dict[str, str] | None = None) -> Any:  # fmt: skip
    """The record's metrics in a registry of their own, labelled with the record's labels
    but ``omit`` (a push's grouping key adds those), and ``add``."""
    from prometheus_client import CollectorRegistry, Counter, Gauge

    found = CollectorRegistry()
    given = {**(record.get("labels") or {"job": "tfboot"}), **(add or {})}
    labels = {k: v for k, v in given.items() if k not in omit}
    names = sorted(labels)
    made: dict[str, Any] = {}

    def gauge(name: str, help_text: str, value: float | None, extra: dict[str, str] | None = None,
              ) -> None:  # fmt: skip
        if value is None:
            return
        keys = names + sorted(extra or {})
        if name not in made:
            made[name] = Gauge(name, help_text, keys, registry=found)
        made[name].labels(**labels, **(extra or {})).set(value)

    for gpu in record.get("gpus") or []:
        extra = {"gpu": str(gpu.get("index")), "framework": str(gpu.get("framework"))}
        gauge("tfboot_gpu_memory_peak_bytes", "GPU memory the framework's allocator peaked at",
              _bytes(gpu.get("peak_mib")), extra)  # fmt: skip
        cap = gpu.get("cap_mib")
        gauge("tfboot_gpu_memory_cap_bytes", "The GPU memory cap tfboot set",
              None if cap is None else cap * MIB, extra)  # fmt: skip
    memory = record.get("host_memory") or {}
    gauge("tfboot_host_memory_peak_bytes", "The container's memory peak",
          _bytes(memory.get("peak_mib")))  # fmt: skip
    gauge("tfboot_host_memory_limit_bytes", "The host-memory limit in force",
          _bytes(memory.get("limit_mib")))  # fmt: skip
    for key, name, text in (
        ("oom_kills", "tfboot_host_memory_oom_kills", "OOM kills in the container during the run"),
        ("high_events", "tfboot_host_memory_high_events", "memory.high events during the run"),
    ):
        if memory.get(key) is not None:
            Counter(name, text, names, registry=found).labels(**labels).inc(memory[key])
    cpu = record.get("cpu") or {}
    if cpu.get("cpu_seconds") is not None:
        Counter("tfboot_cpu_usage_seconds", "CPU time used since the process started", names,
                registry=found).labels(**labels).inc(cpu["cpu_seconds"])  # fmt: skip
    gauge("tfboot_run_duration_seconds", "Wall time since the process started",
          cpu.get("wall_seconds"))  # fmt: skip
    quota = cpu.get("quota")
    gauge("tfboot_cpu_quota_used_ratio", "CPU used over the CPU quota",
          None if not quota or cpu.get("used_cpus") is None
          else cpu["used_cpus"] / quota)  # fmt: skip
    gauge("tfboot_cpu_throttled_ratio", "Share of CFS periods throttled during the run",
          cpu.get("throttled_fraction"))  # fmt: skip
    gauge("tfboot_report_final", "1 for the report at the process's end, 0 for a snapshot",
          1.0 if record.get("final") else 0.0)  # fmt: skip
    suggestion = record.get("suggest") or {}
    for kind, resources in suggestion.get("resources", {}).items():
        for resource, quantity in resources.items():
            value, unit = _quantity(resource, quantity)
            gauge(f"tfboot_suggested_{kind}", f"The {kind} tfboot suggests for the next run",
                  value, {"resource": resource, "unit": unit})  # fmt: skip
    if "MEMORY_LIMIT_MB" in suggestion.get("env", {}):
        gauge("tfboot_suggested_gpu_memory_cap_bytes", "The MEMORY_LIMIT_MB tfboot suggests",
              int(suggestion["env"]["MEMORY_LIMIT_MB"]) * MIB)  # fmt: skip
    return found


def _bytes(value: float | None) -> float | None:
    return None if value is None else value * MIB


def _quantity(resource: str, text: str) -> tuple[float, str]:
    """A suggested quantity (``1500m``, ``2``, ``944Mi``) in cores or bytes."""
    match = _QUANTITY.match(text)
    number = float(match.group(1)) if match else 0.0
    suffix = match.group(2) if match else None
    if resource == "cpu":
        return (number / 1000 if suffix == "m" else number), "core"
    return (number * MIB if suffix == "Mi" else number), "byte"


def identity(record: dict[str, Any]) -> dict[str, str]:
    """The labels that tell this job's metrics from any other job's on the node and on the
    gateway: the Pod (``instance``) with its namespace and task, and the run the usage
    report named (``job.identify``): a Slurm step's (``slurm-JOB.STEP``), a torchrun's, or,
    outside a Kubernetes Pod (no namespace), the lead's own (host, pid, start). A Pod's
    name and namespace name it alone, so a restarted container replaces its metrics."""
    labels = record.get("labels") or {}
    found = {"instance": labels.get("pod", "")}
    for key in ("namespace", "task"):
        if labels.get(key):
            found[key] = labels[key]
    run = (record.get("run") or {}).get("id")
    launched = tuple(r.prefix for r in RUNS)  # the runs a launcher names
    if isinstance(run, str) and run and (run.startswith(launched) or "namespace" not in found):
        found["run"] = run
    return found


def textfile_name(record: dict[str, Any]) -> str:
    """``tfboot-JOB-[NAMESPACE-]POD[-TASK][-RUN].prom``: one file per job in the collector's
    directory, in characters safe in a file name; where making it safe or short changed
    it, a digest of the labels it stands for keeps two jobs apart."""
    key = identity(record)
    parts = [(record.get("labels") or {}).get("job", "tfboot")]
    parts += [key[k] for k in ("namespace", "instance", "task", "run") if key.get(k)]
    safe = [_UNSAFE.sub("_", p) for p in parts]
    name = "-".join(safe)
    if safe != parts or len(name) > MAX_NAME:
        digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]
        name = f"{name[:MAX_NAME]}-{digest}"
    return f"tfboot-{name}.prom"


def write_textfile(directory: str, record: dict[str, Any]) -> str:
    """Write the record's metrics into node-exporter's textfile directory; the file's path.

    ``write_to_textfile`` writes a temporary file beside it and renames it, and the
    collector reads only ``*.prom``, so it never sees half a file.
    """
    from prometheus_client import write_to_textfile

    path = os.path.join(directory, textfile_name(record))
    run = identity(record).get("run")
    write_to_textfile(path, registry(record, add={"run": run} if run else None))
    return path


def push(url: str, record: dict[str, Any], deadline_s: float) -> None:
    """Push the record's metrics to a Pushgateway, grouped by job and the job's
    ``identity``, within ``deadline_s`` in all; the URL's credentials go as basic auth."""
    from prometheus_client import push_to_gateway

    from .gateway import handler, split_credentials

    gateway, credentials = split_credentials(url)
    labels = record["labels"]
    grouping = identity(record)  # prometheus_client escapes each value for the URL's path
    push_to_gateway(gateway, job=labels["job"], registry=registry(record, ("job", *grouping)),
                    grouping_key=grouping, timeout=deadline_s,
                    handler=handler(credentials, deadline_s))  # fmt: skip
