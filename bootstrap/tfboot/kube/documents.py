"""Reading the inputs: files or stdin, JSON or multi-document YAML, Kubernetes quantities.

PyYAML is imported only when an input is not JSON. Untrusted YAML is bounded by the work
it asks for, not only by its bytes: each document is composed first (aliases are shared
nodes then, nothing is copied), its size with every alias expanded is counted in linear
time, and a document that aliases excessively is refused before it is built, by the rule
kubectl's YAML library (go-yaml v3, ``decode.go``, ``allowedAliasRatio``) applies. A key
given twice in one mapping is a finding: tools disagree on which one wins.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from decimal import Decimal, InvalidOperation
from typing import Any

_QUANTITY = re.compile(
    r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))([eE][+-]?\d+|[KMGTPE]i|[numkMGTPE])?$", re.ASCII
)
# Kubernetes keeps a quantity in 64 bits: anything larger is not a quantity it accepts.
MAX_QUANTITY = Decimal(2**63 - 1)
_SUFFIX = {"": Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
           "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
           "P": Decimal("1e15"), "E": Decimal("1e18")}  # fmt: skip
_SUFFIX.update({f"{p}i": Decimal(1024**n) for n, p in enumerate("KMGTPE", start=1)})
# Rendered manifests are far smaller; the bound keeps /dev/zero or a runaway pipe finite.
MAX_BYTES = 32 * 1024 * 1024


class InputError(Exception):
    """An input that cannot be read at all (a missing file, PyYAML not installed)."""


class DocumentError(ValueError):
    """An input that is neither JSON nor YAML."""


def _yaml_module() -> Any:
    try:
        import yaml
    except ImportError:
        raise InputError(
            "reading YAML needs PyYAML: pip install 'tfboot[manifests]' "
            "(JSON input, such as kubectl's -o json, needs nothing)"
        ) from None
    return yaml


def _json_documents(text: str) -> list[Any] | None:
    """Concatenated JSON values, or None when ``text`` is not JSON."""
    decoder, docs, index = json.JSONDecoder(), [], 0
    while True:
        while index < len(text) and text[index].isspace():
            index += 1
        if index == len(text):
            return docs
        try:
            doc, index = decoder.raw_decode(text, index)
        except json.JSONDecodeError:
            return None
        docs.append(doc)


# go-yaml v3's bounds: up to 400,000 decoded nodes 99% may come through aliases, from
# 4,000,000 only 10%, linearly between; and at most this many nodes in all.
ALIAS_LOW, ALIAS_HIGH = 400_000, 4_000_000
MAX_NODES = 10_000_000


def _allowed_alias_ratio(decoded: int) -> float:
    if decoded <= ALIAS_LOW:
        return 0.99
    if decoded >= ALIAS_HIGH:
        return 0.10
    return 0.99 - 0.89 * (decoded - ALIAS_LOW) / (ALIAS_HIGH - ALIAS_LOW)


def _expanded(root: Any) -> tuple[int, int]:
    """(nodes decoded with every alias expanded, of them through an alias), linear time."""
    size: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in size and not done:
            continue
        children = _children(node)
        if not done:
            stack.append((node, True))
            stack += [(c, False) for c in children if id(c) not in size]
            continue
        size[id(node)] = min(MAX_NODES + 1, 1 + sum(size[id(c)] for c in children))
    total = size[id(root)]
    return total, max(0, total - len(size))


def _children(node: Any) -> list[Any]:
    value = getattr(node, "value", None)
    if not isinstance(value, list):
        return []
    return [n for pair in value for n in (pair if isinstance(pair, tuple) else (pair,))]


def _duplicates(root: Any, notes: list[str]) -> None:
    """A note for each key given twice in one mapping (each mapping looked at once)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if getattr(node, "id", "") == "mapping":
            first: dict[str, int] = {}
            for key, _value in node.value:
                if getattr(key, "id", "") != "scalar":
                    continue
                line = key.start_mark.line + 1
                if key.value in first:
                    notes.append(
                        f"line {line}: the key {key.value!r} is given twice in one mapping "
                        f"(first on line {first[key.value]}); tools disagree on which one wins"
                    )
                else:
                    first[key.value] = line
        stack += _children(node)


def _yaml_documents(text: str, notes: list[str]) -> list[Any]:
    yaml = _yaml_module()
    docs: list[Any] = []
    try:
        loader = yaml.SafeLoader(text)
    except yaml.YAMLError as exc:
        raise DocumentError(" ".join(str(exc).split())) from None
    try:
        while loader.check_node():
            node = loader.get_node()
            decoded, aliased = _expanded(node)
            if decoded > MAX_NODES or (
                aliased > 100
                and decoded > 1000
                and aliased / decoded > _allowed_alias_ratio(decoded)
            ):
                raise DocumentError(
                    f"document {len(docs) + 1} contains excessive aliasing: "
                    f"{min(decoded, MAX_NODES)}{'+' if decoded > MAX_NODES else ''} nodes once its "
                    "aliases are expanded (kubectl refuses it too)"
                )
            _duplicates(node, notes)
            docs.append(loader.construct_document(node))
    except yaml.YAMLError as exc:
        raise DocumentError(" ".join(str(exc).split())) from None
    finally:
        loader.dispose()
    return docs


def parse_documents(text: str, notes: list[str] | None = None) -> list[Any]:
    """Every document in ``text`` (JSON or multi-document YAML), ``List`` items expanded;
    what is worth a finding but still reads (a key given twice) goes to ``notes``."""
    notes = [] if notes is None else notes
    try:
        docs = _json_documents(text) if text.lstrip()[:1] in ("{", "[") else None
        if docs is None:
            docs = _yaml_documents(text, notes)
    except RecursionError:
        raise DocumentError("nested too deeply to be a Kubernetes manifest") from None
    expanded: list[Any] = []
    for doc in docs:
        if isinstance(doc, list):
            expanded += doc
        elif isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List"):
            expanded += doc.get("items") or []
        elif doc is not None:
            expanded.append(doc)
    return expanded


def read_source(path: str, keep_bom: bool = False) -> tuple[str, str]:
    """``(display name, text)`` of a file, or of stdin for ``-``; with ``keep_bom``, a UTF-8
    byte order mark stays at the text's start (to write it back)."""
    name = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            stdin = getattr(sys.stdin, "buffer", None)  # None when replaced by a text stream
            data = stdin.read(MAX_BYTES + 1) if stdin else sys.stdin.read(MAX_BYTES + 1).encode()
        else:  # opened without blocking, then read only if it is a regular file
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as fh:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise InputError(
                        f"cannot read {name}: not a regular file (a FIFO, a device, a socket); "
                        "give a file, or - for stdin"
                    )
                data = fh.read(MAX_BYTES + 1)
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise InputError(f"cannot read {name}: {reason}") from None
    if len(data) > MAX_BYTES:
        raise InputError(f"cannot read {name}: larger than {MAX_BYTES // 2**20} MiB")
    try:
        bom = "\ufeff" if keep_bom and data.startswith(b"\xef\xbb\xbf") else ""
        return name, bom + data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(f"cannot read {name}: line {line} is not UTF-8 text") from None


def quantity(value: Any) -> Decimal | None:
    """A Kubernetes quantity (``500m``, ``16Gi``, ``2``) as a number, or None if invalid."""
    match = _QUANTITY.match(str(value).strip()) if value is not None else None
    if not match:
        return None
    number, suffix = match.group(1), match.group(2) or ""
    try:
        if suffix[:1] in ("e", "E"):
            amount = Decimal(number + suffix)
        else:
            amount = Decimal(number) * _SUFFIX[suffix]
    except InvalidOperation:
        return None
    return amount if abs(amount) <= MAX_QUANTITY else None
