"""``tfboot manifests``: check Kubernetes manifests for what schema validation misses.

Schema validation (``kubernetes-validate --strict``) cannot tell that ``MEMORY_LIMIT_MB`` is
larger than the GPU share the Pod asks for, or that a hardened container is not. This
checker reads each workload's Pod template (Pod, PodTemplate, Job, CronJob, Deployment,
StatefulSet, DaemonSet, ReplicaSet, ReplicationController), rebuilds every container's
environment the way the kubelet and the GPU device plugin would, and runs tfboot's own
parser and planner on it (``settings.resolve``, ``plan.make_plan``): one parser, no copy.
DRA ResourceClaims and ResourceClaimTemplates in the inputs give their containers GPUs
and, under NVIDIA's MPS sharing, the memory limit the cap must stay below; KAI Scheduler's
annotations (``gpu-memory``, ``gpu-fraction``) give a share of a GPU to one container.

Input: files or ``-`` (stdin), multi-document YAML or JSON (a ``List`` too). JSON needs
nothing extra; YAML needs PyYAML (``pip install 'tfboot[manifests]'``), imported only here.

Output: one line per finding (file, object, container, severity, rule, message, fix), or
``--json``. Exit status: 1 on any error (or warning under ``--strict``), 2 when an input
cannot be read at all, else 0.

This module is the command line. The rest of the package: ``documents`` (reading inputs),
``workloads`` (Pod templates, containers, GPU grants), ``claims`` (DRA claims and their MPS
limits), ``dracaps`` (the cap each container needs under one), ``kai`` and ``kaishares`` (KAI
Scheduler's shares and their findings), ``headroom`` (what a cap keeps below a share),
``environment`` (a container's env), ``variables`` and ``hardening`` (the checks),
``checker`` (running them), ``rules`` and ``report`` (the rule table, findings and output).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..kube.documents import InputError, quantity
from ..kube.dracaps import mps_caps, pod_mps_caps
from ..kube.environment import container_env
from ..kube.report import Finding, Report, print_report
from ..kube.rules import RULES
from ..kube.workloads import Container, GpuGrant, gpu_grant
from .checker import check_paths, check_text

__all__ = [
    "RULES",
    "Container",
    "Finding",
    "GpuGrant",
    "InputError",
    "Report",
    "add_arguments",
    "check_paths",
    "check_text",
    "container_env",
    "gpu_grant",
    "main",
    "mps_caps",
    "pod_mps_caps",
    "quantity",
    "run",
]


DESCRIPTION = (
    "Check Kubernetes manifests: tfboot variables against the resources granted (GPU shares, "
    "GPU counts, CPU limits), valid values, the hardened security context, pinned images. "
    "Schema validation does not catch these."
)
EPILOG = "example: kubectl kustomize k8s/overlays/shared-gpu-hami | tfboot manifests -"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's arguments, for a parser made elsewhere."""
    parser.add_argument("paths", nargs="*", metavar="PATH", help="YAML or JSON files; - for stdin")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--strict", action="store_true", help="fail on warnings too")
    parser.add_argument("--list-rules", action="store_true", help="print the rules and exit")


def run(args: argparse.Namespace) -> int:
    """Run the checks as ``args`` say; the exit status."""
    if args.list_rules:
        for rule, (severity, summary) in RULES.items():
            print(f"{rule:<28} {severity:<8} {summary}")
        return 0
    if not args.paths:
        print("tfboot manifests: give files, or - for stdin", file=sys.stderr)
        return 2
    try:
        report = check_paths(args.paths)
    except InputError as exc:
        print(f"tfboot manifests: {exc}", file=sys.stderr)
        return 2
    print_report(report, as_json=args.json)
    return 1 if report.failed(args.strict) else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``tfboot manifests PATH...|-``: the exit status."""
    parser = argparse.ArgumentParser(
        prog="tfboot manifests", description=DESCRIPTION, epilog=EPILOG
    )
    add_arguments(parser)
    return run(parser.parse_args(list(sys.argv[1:] if argv is None else argv)))
