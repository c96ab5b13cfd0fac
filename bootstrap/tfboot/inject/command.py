"""``tfboot inject`` and ``tfboot uninject``: put tfboot into Pod templates of manifests, or
take it out, offline (the GitOps path: the manifest in git is what runs).

Input: files or ``-``, multi-document YAML or JSON; output: the same documents with every
Pod template injected (``template.py`` says with what), comments, order and untouched
documents kept (``yamltext``). Every input is read and changed before anything is printed:
a workload that cannot be injected (a ``PYTHONPATH`` from ``valueFrom``, an annotation naming
no container) is an error naming it, and nothing is printed. Notes go to stderr: a command
that runs Python with ``-I``, ``-E`` or ``-S``, and each part of an object that runs
containers but is no Pod template inject can change (``workloads.unreached``: Argo's
templates, a KServe model server, a TrainJob), named with the reason. Exit status: 0 (with
notes too), 1 on such an error, 2 when an input cannot be read.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable
from typing import Any

from ..kube import template
from ..kube.documents import DocumentError, InputError, parse_documents, read_source
from ..kube.workloads import unreached
from .patch import InjectError, Options, inject, opted_out, uninject

DESCRIPTION = (
    "Add tfboot to the Pod templates of Kubernetes manifests (an init container or an image "
    "volume with the injector image, a read-only mount, PYTHONPATH), with no change to the "
    "images; print them."
)
UNDO = "Take out what tfboot inject added, giving back the manifests as they were; print them."


def add_arguments(parser: argparse.ArgumentParser, undo: bool = False) -> None:
    """The command's arguments, for a parser made elsewhere."""
    parser.add_argument("paths", nargs="+", metavar="PATH", help="YAML or JSON files; - for stdin")
    if not undo:
        parser.add_argument("--image", required=True,
                            help="the injector image (docker/inject/build.sh)")  # fmt: skip
        parser.add_argument("--memory-from-claims", action="store_true",
                            help="set MEMORY_LIMIT_MB (where unset or auto) from the container's "
                                 "DRA claim's MPS limit, minus TensorFlow's headroom "
                                 "(docs/gpu-memory.md); the claims must be among the "
                                 "inputs")  # fmt: skip
        parser.add_argument("--shm", action="store_true",
                            help="give each container with the runtime's 64 MiB /dev/shm "
                                 "and limits.memory of 512Mi or more its own memory-backed "
                                 "one (an emptyDir with medium: Memory, a quarter of its "
                                 "limits.memory), for PyTorch's DataLoader workers and NCCL "
                                 "(docs/inject.md)")  # fmt: skip
        parser.add_argument("--mode", choices=template.MODES, default="init",
                            help="init: an init container copies the tree into an emptyDir "
                                 "(default); image: a Kubernetes image volume (1.33+)")  # fmt: skip


def _each_object(doc: Any) -> list[dict[str, Any]]:
    if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
        return [item for item in doc["items"] if isinstance(item, dict)]
    return [doc] if isinstance(doc, dict) else []


def _object_name(obj: dict[str, Any]) -> str:
    """The object's name, else its ``generateName`` (Argo's, a Job's), else ``?``."""
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    return str(metadata.get("name") or metadata.get("generateName") or "?")


Change = Callable[[dict[str, Any], str], list[str]]


def rewrite_text(text: str, change: Change) -> tuple[str, list[str]]:
    """``text`` with ``change`` applied to every object in it; the notes it made."""
    from . import yamltext

    bom = "\ufeff" if text.startswith("\ufeff") else ""  # written back as it was
    text = text[len(bom) :]
    parse_documents(text)  # the bounds on untrusted input (aliases, depth, size) first
    import yaml

    # Both sides as JSON values (a timestamp as its text), so a value inject did not change
    # compares equal and keeps its text.
    docs = json.loads(json.dumps(list(yaml.safe_load_all(text)), default=str))
    new = json.loads(json.dumps(docs))
    notes: list[str] = []
    for doc in new:
        for obj in _each_object(doc):
            name = f"{obj.get('kind')}/{_object_name(obj)}"
            notes += change(obj, name)
    try:
        out = yamltext.rewrite(text, docs, new)
    except (yaml.YAMLError, LookupError, TypeError) as exc:  # a form the writer cannot edit
        raise InjectError(
            f"a YAML form tfboot cannot edit in place ({_first_line(exc)}): a merge key (<<) "
            "or an unusual node; expand it by hand, or write the Pod template in block style"
        ) from None
    _reads_back(out, new)
    return bom + out, notes


def _reads_back(out: str, intended: list[Any]) -> None:
    """The text written must parse to exactly the objects intended, or nothing is printed:
    a text edit that went wrong is an error naming the document, never corrupt output."""
    import yaml

    try:
        found = json.loads(json.dumps(list(yaml.safe_load_all(out)), default=str))
    except yaml.YAMLError as exc:
        raise InjectError(f"the edited text does not parse again ({_first_line(exc)})") from None
    if len(found) != len(intended):
        raise InjectError(f"the edited text holds {len(found)} document(s), not {len(intended)}")
    for index, (got, meant) in enumerate(zip(found, intended, strict=True)):
        if got != meant:
            kind = meant.get("kind") if isinstance(meant, dict) else None
            raise InjectError(
                f"document {index + 1} ({kind or 'no kind'}) would not read back as the edit "
                "intended (a YAML form tfboot cannot edit in place here): edit it by hand, or "
                "write it in block style"
            )


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def run(args: argparse.Namespace) -> int:
    """Inject (or, for ``uninject``, take out) and print; the exit status."""
    command = "tfboot uninject" if args.command == "uninject" else "tfboot inject"
    if args.command == "uninject":

        def change(obj: dict[str, Any], name: str) -> list[str]:
            return uninject(obj, name)

    sources: list[tuple[str, str]] = []
    for path in args.paths:
        try:
            sources.append(read_source(path, keep_bom=True))
        except InputError as exc:
            print(f"{command}: {exc}", file=sys.stderr)
            return 2
    if args.command != "uninject":
        claims = None
        if args.memory_from_claims:
            from ..kube.claims import read_claims

            docs = []
            for _, text in sources:
                with contextlib.suppress(DocumentError, ImportError):  # said below, per file
                    docs += parse_documents(text)
            claims = read_claims(docs)
        opts = Options(args.image, args.mode, claims, args.shm)

        def change(obj: dict[str, Any], name: str) -> list[str]:
            if opted_out(obj, {}, name):
                return []  # the whole object is left alone: nothing to say of it
            skipped = [f"{name}: {why}" for why in unreached(obj)]
            return inject(obj, opts, name) + skipped

    outputs: list[str] = []
    for file, text in sources:
        try:
            out, notes = rewrite_text(text, change)
        except ImportError:
            print(f"{command}: reading YAML needs PyYAML: pip install 'tfboot[manifests]'",
                  file=sys.stderr)  # fmt: skip
            return 2
        except (InjectError, DocumentError, ValueError) as exc:
            print(f"{command}: {file}: {exc}; nothing was printed", file=sys.stderr)
            return 1
        outputs.append(out)
        for note in notes:
            print(f"{command}: note: {file}: {note}", file=sys.stderr)
    sys.stdout.write("".join(_joined(outputs)))
    return 0


def _joined(outputs: list[str]) -> list[str]:
    """The outputs of several files as one stream of documents."""
    joined = []
    for index, out in enumerate(outputs):
        if index and not out.lstrip().startswith("---"):
            joined.append("---\n")
        joined.append(out if out.endswith("\n") or not out else out + "\n")
    return joined
