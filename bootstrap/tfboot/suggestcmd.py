"""``tfboot suggest FILE...``: one suggestion from many usage files (a Job's Pods, repeated runs).

Prints the suggestion as ``KEY=value`` lines and as a kustomize patch (strategic merge) for
the workload's container; ``--env``, ``--patch`` or ``--json`` print one of them. Each
figure is taken at a percentile over the runs: CPU at ``--cpu-percentile`` (95), memory
and GPU memory at ``--memory-percentile`` (100: the largest), with the margins
``tfboot.usage.suggest`` documents. Exit status 2 when a file cannot be read or is not a
usage record.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .usage.schema import Unusable, read
from .usage.suggest import CPU_PERCENTILE, KINDS, MEMORY_PERCENTILE, env_lines, patch, suggest

MAX_FILE_BYTES = 16 * 1024 * 1024  # a usage record is a few KiB


class UnusableFile(Exception):
    """A file that is not a usage record tfboot can read; the message names it."""


def read_record(path: str) -> dict[str, Any]:
    """One usage record; ``UnusableFile`` naming the file and the reason (never its content).
    Only a regular file is opened (a FIFO or a device would block or never end)."""
    try:
        return read(path, MAX_FILE_BYTES)
    except OSError as exc:
        raise UnusableFile(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except Unusable as exc:
        raise UnusableFile(f"{path}: {exc}") from None


def _percentile(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 1 <= value <= 100:
        raise argparse.ArgumentTypeError(f"expected a percentile from 1 to 100, got {text!r}")
    return value


def _name(text: str) -> str:
    if not text.strip() or len(text) > 253 or not text.isprintable():
        raise argparse.ArgumentTypeError("expected a Kubernetes name of 1 to 253 characters")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="usage files (TFBOOT_USAGE_FILE)")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print one JSON object")
    output.add_argument("--env", action="store_true", help="print only the KEY=value lines")
    output.add_argument("--patch", action="store_true", help="print only the kustomize patch")
    parser.add_argument(
        "--cpu-percentile",
        type=_percentile,
        default=CPU_PERCENTILE,
        metavar="P",
        help=f"CPU over the runs (default {CPU_PERCENTILE})",
    )
    parser.add_argument(
        "--memory-percentile",
        type=_percentile,
        default=MEMORY_PERCENTILE,
        metavar="P",
        help=f"host and GPU memory over the runs (default {MEMORY_PERCENTILE}: the largest)",
    )
    parser.add_argument("--kind", choices=tuple(KINDS), default="Job",
                        help="the workload the patch is for (default Job)")  # fmt: skip
    parser.add_argument("--name", type=_name, default="tfboot-train",
                        help="its metadata.name (default tfboot-train)")  # fmt: skip
    parser.add_argument("--container", type=_name, default="train",
                        help="its container (default train)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    try:
        records = [read_record(path) for path in args.files]
    except UnusableFile as exc:
        print(f"tfboot suggest: {exc}", file=sys.stderr)
        return 2
    found = suggest(records, args.cpu_percentile, args.memory_percentile)
    text = patch(found, args.kind, args.name, args.container)
    if args.json:
        print(json.dumps({"runs": len(records), "suggest": found, "patch": text}, indent=2))
        return 0
    if args.patch:
        print(text, end="")
        return 0
    if args.env:
        lines = env_lines(found)
        for entry in lines:
            print(entry)
        if not lines:  # an empty .env file is valid; say why it is empty
            print("tfboot suggest: no variable to set: no GPU memory was measured (the Pod's "
                  "resources are in --patch)", file=sys.stderr)  # fmt: skip
        return 0
    print(f"# tfboot suggest: {len(records)} usage file(s)")
    for figure, source in found["sources"].items():
        print(f"# {figure}: {source}")
    for reason in found["why"]:
        print(f"# grows: {reason}")
    for note in found["notes"]:
        print(f"# note: {note}")
    print("# env")
    for entry in env_lines(found):
        print(entry)
    slurm = " ".join(f"{k}={v}" for k, v in found["slurm"].items())
    if slurm:
        print(f"# Slurm: {slurm}")
    print("# kustomize patch")
    print(text, end="")
    return 0
