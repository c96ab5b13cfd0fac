"""Write a changed object back into its YAML text, touching only what changed.

``inject`` and ``uninject`` change parsed objects; this module turns each change into an
edit of the original text, found through PyYAML's node positions: a new mapping key goes
after the mapping's last entry, a new list item after the last item, each in the block style
and indentation around it; a removed one takes its lines with it; a changed scalar keeps its
quoting where the new value allows. Comments, key order, quoting and every document that
did not change stay byte for byte, so ``uninject`` after ``inject`` gives the text back. A
flow collection (JSON, ``[]``, ``{}``) that changes is written again as JSON, which is YAML.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

import yaml

Edit = tuple[int, int, str]


class Unsupported(ValueError):
    """A document this module cannot edit in place (an anchor whose aliases would differ)."""


class _Dumper(yaml.SafeDumper):
    """Block YAML with no anchors: a value used twice is written twice."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


class _Indented(_Dumper):
    """Block sequences indented under their key (``key:\\n  - item``)."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def rewrite(text: str, old_docs: list[Any], new_docs: list[Any | None]) -> str:
    """``text`` with each document written from its old value (``old_docs``, as
    ``yaml.safe_load_all`` read ``text``) to its new one; a None new value is left alone."""
    nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    edits: list[Edit] = []
    for node, old, new in zip(nodes, old_docs, new_docs, strict=True):
        if new is None or node is None or old == new:
            continue
        writer = _Writer(text, edits)
        if isinstance(node, yaml.CollectionNode) and node.flow_style:  # a JSON document
            writer._replace(node, writer._flow(node, new))
        else:
            writer.walk(node, old, new)
    # From the end back; at one place the last made first, so the first made (the deepest
    # part's) ends up first.
    out = text
    crlf = "\r\n" in text  # the lines written end as the text's own do
    order = sorted(range(len(edits)), key=lambda i: (edits[i][0], edits[i][1], i), reverse=True)
    for start, end, replacement in (edits[i] for i in order):
        if crlf:
            replacement = re.sub(r"(?<!\r)\n", "\r\n", replacement)
        out = out[:start] + replacement + out[end:]
    return out


class _Writer:
    def __init__(self, text: str, edits: list[Edit]) -> None:
        self.text, self.edits = text, edits
        self.seen: dict[int, str] = {}
        self.indented = True

    def walk(self, node: yaml.Node, old: Any, new: Any, flow: bool = False) -> None:
        if old == new:
            return
        # A node reached twice is an anchor and its alias: one edit serves both, if both
        # places change alike (the same Pod template injected alike).
        value = json.dumps(new, sort_keys=True, default=str)
        if id(node) in self.seen:
            if self.seen[id(node)] != value:
                raise Unsupported("an anchor and its alias would change differently: expand "
                                  "the YAML aliases first")  # fmt: skip
            return
        self.seen[id(node)] = value
        mapping = isinstance(node, yaml.MappingNode) and isinstance(old, dict)
        sequence = isinstance(node, yaml.SequenceNode) and isinstance(old, list)
        if mapping and isinstance(new, dict):
            (self._flow_mapping if node.flow_style else self._mapping)(node, old, new)
        elif sequence and isinstance(new, list):
            (self._flow_sequence if node.flow_style else self._sequence)(node, old, new)
        elif isinstance(node, yaml.ScalarNode) and not isinstance(new, (dict, list)):
            self._replace(node, _scalar(new, node.style, flow))
        else:
            self._replace(node, self._flow(node, new))

    # -- flow collections: edited inside their brackets, as written ------------------------
    def _close(self, node: yaml.Node, bracket: str) -> int:
        close = node.end_mark.index - 1
        if self.text[close : close + 1] != bracket:
            raise Unsupported(f"a flow collection does not end with {bracket}")
        return close

    def _flow_sequence(self, node: yaml.SequenceNode, old: list[Any], new: list[Any]) -> None:
        items, kept = node.value, min(len(old), len(new))
        for i in range(kept):
            self.walk(items[i], old[i], new[i], flow=True)
        if len(new) > len(old):
            at = self._close(node, "]")
            added = ", ".join(json.dumps(x, ensure_ascii=False) for x in new[kept:])
            self.edits.append((at, at, (", " if old else "") + added))
        elif len(new) < len(old):
            start = items[kept - 1].end_mark.index if kept else items[0].start_mark.index
            self.edits.append((start, items[-1].end_mark.index, ""))

    def _flow_mapping(
        self, node: yaml.MappingNode, old: dict[str, Any], new: dict[str, Any]
    ) -> None:
        entries = node.value
        gone = [i for i, (k, _) in enumerate(entries) if self._key(k) not in new]
        if gone and gone[0] == 0 and len(gone) > 1:
            self._replace(node, self._flow(node, new))
            return
        for i, (key_node, value_node) in enumerate(entries):
            key = self._key(key_node)
            if i in gone:
                start = entries[i - 1][1].end_mark.index if i else key_node.start_mark.index
                end = (value_node.end_mark.index if i
                       else entries[1][0].start_mark.index if len(entries) > 1
                       else value_node.end_mark.index)  # fmt: skip
                self.edits.append((start, end, ""))
            else:
                self.walk(value_node, old[key], new[key], flow=True)
        added = [(k, v) for k, v in new.items() if k not in old]
        if added:
            at = self._close(node, "}")
            text = ", ".join(f"{json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}"
                             for k, v in added)  # fmt: skip
            self.edits.append((at, at, (", " if len(entries) > len(gone) else "") + text))

    def _key(self, node: yaml.Node) -> Any:
        return yaml.safe_load(self.text[node.start_mark.index : node.end_mark.index])

    # -- mappings -----------------------------------------------------------------------
    def _mapping(self, node: yaml.MappingNode, old: dict[str, Any], new: dict[str, Any]) -> None:
        column = node.value[0][0].start_mark.column
        self.indented = self._style(node)
        for key_node, value_node in node.value:
            key = self._key(key_node)
            if key not in new:
                self._delete(key_node.start_mark.index, value_node)
            else:
                self.walk(value_node, old[key], new[key])
        added = {k: v for k, v in new.items() if k not in old}
        if added:
            at = self._after(node.value[-1][1])
            self.edits.append((at, at, self._block(added, column)))

    # -- sequences ----------------------------------------------------------------------
    def _sequence(self, node: yaml.SequenceNode, old: list[Any], new: list[Any]) -> None:
        items = node.value
        column = self._dash(items[0])
        keys = [json.dumps(x, sort_keys=True, default=str) for x in old]
        matcher = difflib.SequenceMatcher(None, keys,
                                          [json.dumps(x, sort_keys=True, default=str) for x in new],
                                          autojunk=False)  # fmt: skip
        for op, i1, i2, j1, j2 in matcher.get_opcodes():
            if op == "equal":
                continue
            if op == "replace" and i2 - i1 == j2 - j1:
                for i, j in zip(range(i1, i2), range(j1, j2), strict=True):
                    self.walk(items[i], old[i], new[j])
                continue
            for i in range(i1, i2):
                self._delete(self._dash_index(items[i]), items[i])
            if j2 > j1:
                at = (
                    self._after(items[i1 - 1])
                    if i1
                    else self._line_start(self._dash_index(items[0]))
                )
                self.edits.append((at, at, self._block(new[j1:j2], column)))

    # -- text positions -----------------------------------------------------------------
    def _line_start(self, index: int) -> int:
        return self.text.rfind("\n", 0, index) + 1

    def _content_end(self, node: yaml.Node) -> int:
        while isinstance(node, yaml.CollectionNode) and not node.flow_style and node.value:
            last = node.value[-1]
            node = last[1] if isinstance(last, tuple) else last
        end = node.end_mark.index
        while end > 0 and self.text[end - 1] in " \t\r\n":
            end -= 1
        return end

    def _after(self, node: yaml.Node) -> int:
        """Where a line goes after ``node``'s last line (its comment stays with it)."""
        newline = self.text.find("\n", self._content_end(node))
        if newline < 0:
            self.edits.append((len(self.text), len(self.text), "\n"))
            return len(self.text)
        return newline + 1

    def _dash_index(self, item: yaml.Node) -> int:
        index = item.start_mark.index - 1
        while index >= 0 and self.text[index] in " \t":
            index -= 1
        if index < 0 or self.text[index] != "-":
            raise Unsupported("a list item is not where a block list puts it")
        return index

    def _dash(self, item: yaml.Node) -> int:
        index = self._dash_index(item)
        return index - self._line_start(index)

    def _delete(self, start: int, last: yaml.Node) -> None:
        """Delete from ``start`` (a key or a dash alone on its line) to ``last``'s line end."""
        begin = self._line_start(start)
        if self.text[begin:start].strip():
            raise Unsupported("a removed entry shares its line with another")
        self.edits.append((begin, self._after(last), ""))

    def _replace(self, node: yaml.Node, text: str) -> None:
        start, end = node.start_mark.index, node.end_mark.index
        if start == end and not self.text[start - 1 : start].isspace():
            text = " " + text  # an empty value (`key:`) written after its colon
        self.edits.append((start, end, text))

    def _style(self, node: yaml.Node) -> bool:
        """Whether the document indents block lists under their key (kubectl does not)."""
        for key_node, value_node in node.value:
            if isinstance(value_node, yaml.SequenceNode) and not value_node.flow_style:
                return self._dash(value_node.value[0]) > key_node.start_mark.column
        return self.indented

    def _block(self, value: Any, column: int) -> str:
        dumped = yaml.dump(value, Dumper=_Indented if self.indented else _Dumper,
                           default_flow_style=False, sort_keys=False, allow_unicode=True,
                           width=1 << 16)  # fmt: skip
        pad = " " * column
        return "".join(pad + line if line.strip() else line for line in dumped.splitlines(True))

    def _flow(self, node: yaml.Node, value: Any) -> str:
        source = self.text[node.start_mark.index : node.end_mark.index]
        if "\n" not in source.strip():
            return json.dumps(value, ensure_ascii=False)
        second = source.split("\n", 1)[1]
        indent = len(second) - len(second.lstrip(" ")) - node.start_mark.column
        return json.dumps(value, ensure_ascii=False, indent=max(indent, 1)).replace(
            "\n", "\n" + " " * node.start_mark.column
        )


def _scalar(value: Any, style: str | None, flow: bool = False) -> str:
    """``value`` as a YAML scalar, in ``style`` (plain, ``'`` or ``"``) where it allows; in a
    flow collection, plain only without its indicators."""
    if isinstance(value, str):
        plain = "\n" not in value and value.strip() == value and value
        if flow and any(c in value for c in ",[]{}#"):
            plain = False
        if style in (None, "") and plain:
            try:
                if yaml.safe_load(f"k: {value}") == {"k": value}:
                    return value
            except yaml.YAMLError:
                pass
        if style == "'" and "\n" not in value:
            return "'" + value.replace("'", "''") + "'"
    return json.dumps(value, ensure_ascii=False)
