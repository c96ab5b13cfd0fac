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
DASH_COMMENT = re.compile(r"[ \t]*(-)[ \t]+#.*")
MERGE = "tag:yaml.org,2002:merge"  # the key ``<<``
# What may be written into a scalar as it stands (a PYTHONPATH's entries): no quote, no
# escape, no line break, nothing that starts a comment or a mapping value.
VERBATIM = re.compile(r"[A-Za-z0-9/._@+=~-]*(:[A-Za-z0-9/._@+=~-]+)*:?")


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
    nodes, aliases = _compose(text)
    edits: list[Edit] = []
    for index, (node, old, new) in enumerate(zip(nodes, old_docs, new_docs, strict=True)):
        if new is None or node is None or old == new:
            continue
        try:
            _Writer(text, edits, aliases).walk(node, old, new)
        except Unsupported as exc:
            kind = new.get("kind") if isinstance(new, dict) else None
            raise Unsupported(f"document {index + 1} ({kind or 'no kind'}): {exc}") from None
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


Slot = tuple[int, Any]  # a node's place: its parent's id, and its key node's id or its index


class _Composer(yaml.SafeLoader):
    """PyYAML's composer, noting where each alias (``*name``) stands: the node it gives is
    the anchor's, whose marks are the anchor's place, not the alias's."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.aliases: dict[Slot, tuple[int, int]] = {}

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            self.aliases[_slot(parent, index)] = (event.start_mark.index, event.end_mark.index)
        return super().compose_node(parent, index)


def _slot(parent: yaml.Node | None, index: Any) -> Slot:
    return id(parent), id(index) if isinstance(index, yaml.Node) else index


def _compose(text: str) -> tuple[list[yaml.Node | None], dict[Slot, tuple[int, int]]]:
    """Every document's node, and where the aliases stand."""
    loader = _Composer(text)
    try:
        nodes = []
        while loader.check_node():
            nodes.append(loader.get_node())
        return nodes, loader.aliases
    finally:
        loader.dispose()


class _Writer:
    def __init__(self, text: str, edits: list[Edit],
                 aliases: dict[Slot, tuple[int, int]]) -> None:  # fmt: skip
        self.text, self.edits, self.aliases = text, edits, aliases
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
            self._scalar(node, old, new, flow)
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
            added = [json.dumps(x, ensure_ascii=False) for x in new[kept:]]
            self._flow_add(node, "]", items[-1] if items else None, items[-1] if items else None,
                           added)  # fmt: skip
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
        added = [f"{json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}"
                 for k, v in new.items() if k not in old]  # fmt: skip
        if added:
            kept = [entry for i, entry in enumerate(entries) if i not in gone]
            self._flow_add(node, "}", kept[-1][0] if kept else None,
                           kept[-1][1] if kept else None, added)  # fmt: skip

    def _flow_add(self, node: yaml.CollectionNode, bracket: str, first: yaml.Node | None,
                  last: yaml.Node | None, added: list[str]) -> None:  # fmt: skip
        """Add items to a flow collection right after its last item (``first`` is where
        that item starts: its key in a mapping), before a trailing comma or a comment; on
        a line of their own where the items are each on one."""
        close = self._close(node, bracket)
        if first is None or last is None:
            self.edits.append((close, close, ", ".join(added)))
            return
        at = last.end_mark.index
        if "\n" in self.text[at:close]:
            column = first.start_mark.column
            sep = ",\n" + " " * column
            self.edits.append((at, at, "".join(sep + item for item in added)))
        else:
            self.edits.append((at, at, "".join(", " + item for item in added)))

    def _key(self, node: yaml.Node) -> Any:
        return yaml.safe_load(self.text[node.start_mark.index : node.end_mark.index])

    # -- mappings -----------------------------------------------------------------------
    def _mapping(self, node: yaml.MappingNode, old: dict[str, Any], new: dict[str, Any]) -> None:
        column = node.value[0][0].start_mark.column
        self.indented = self._style(node)
        own = [(k, v) for k, v in node.value if k.tag != MERGE]
        if len(own) < len(node.value):
            _merged_unchanged({self._key(k) for k, _ in own}, old, new)
        for key_node, value_node in own:
            key = self._key(key_node)
            if key not in new:
                self._delete(key_node.start_mark.index, node, key_node, value_node)
            else:
                self.walk(value_node, old[key], new[key])
        added = {k: v for k, v in new.items() if k not in old}
        if added:
            at = self._after(node, *node.value[-1])
            self.edits.append((at, at, self._block(added, column)))

    # -- sequences ----------------------------------------------------------------------
    def _sequence(self, node: yaml.SequenceNode, old: list[Any], new: list[Any]) -> None:
        items = node.value
        column = self._dash(node, 0)
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
                self._delete(self._dash_index(node, i), node, i, items[i])
            if j2 > j1:
                at = (
                    self._after(node, i1 - 1, items[i1 - 1])
                    if i1
                    else self._line_start(self._dash_index(node, 0))
                )
                self.edits.append((at, at, self._block(new[j1:j2], column)))

    # -- text positions -----------------------------------------------------------------
    def _line_start(self, index: int) -> int:
        return self.text.rfind("\n", 0, index) + 1

    def _content_end(self, parent: yaml.Node, index: Any, node: yaml.Node) -> int:
        """Where the text of ``node`` (at ``index`` in ``parent``) ends: its last leaf's end,
        or its alias's, not counting the line breaks and comments that follow."""
        while True:
            alias = self.aliases.get(_slot(parent, index))
            if alias is not None:
                end = alias[1]
                break
            if _keeps_breaks(self.text, node):  # its final empty lines are its own
                return node.end_mark.index - 1
            if not (isinstance(node, yaml.CollectionNode) and not node.flow_style and node.value):
                end = node.end_mark.index
                break
            parent = node
            if isinstance(node, yaml.MappingNode):
                index, node = node.value[-1]
            else:
                index, node = len(node.value) - 1, node.value[-1]
        while end > 0 and self.text[end - 1] in " \t\r\n":
            end -= 1
        return end

    def _after(self, parent: yaml.Node, index: Any, node: yaml.Node) -> int:
        """Where a line goes after ``node``'s last line (its comment stays with it)."""
        newline = self.text.find("\n", self._content_end(parent, index, node))
        if newline < 0:
            self.edits.append((len(self.text), len(self.text), "\n"))
            return len(self.text)
        return newline + 1

    def _dash_index(self, sequence: yaml.SequenceNode, i: int) -> int:
        alias = self.aliases.get(_slot(sequence, i))
        index = (alias[0] if alias else sequence.value[i].start_mark.index) - 1
        while index >= 0 and self.text[index] in " \t\r\n":  # the item may start a line below
            index -= 1
        start = self._line_start(index)
        dash = DASH_COMMENT.fullmatch(self.text[start : index + 1])  # `- # a comment`
        if dash:
            index = start + dash.start(1)
        if index < 0 or self.text[index] != "-":
            raise Unsupported("a list item is not where a block list puts it")
        return index

    def _dash(self, sequence: yaml.SequenceNode, i: int) -> int:
        index = self._dash_index(sequence, i)
        return index - self._line_start(index)

    def _delete(self, start: int, parent: yaml.Node, index: Any, last: yaml.Node) -> None:
        """Delete from ``start`` (a key or a dash alone on its line) to the line end of
        ``last`` (at ``index`` in ``parent``)."""
        begin = self._line_start(start)
        if self.text[begin:start].strip():
            raise Unsupported("a removed entry shares its line with another")
        self.edits.append((begin, self._after(parent, index, last), ""))

    # -- scalars ------------------------------------------------------------------------
    def _scalar(self, node: yaml.ScalarNode, old: Any, new: Any, flow: bool) -> None:
        """A changed scalar: where only its start changes (an entry put before a
        ``PYTHONPATH``, or taken away again), that text alone is written or removed, so the
        rest, its style (a block scalar's too) and escapes stay as they were; otherwise it
        is written again in its quoting style."""
        if isinstance(old, str) and isinstance(new, str) and old != new:
            at = self._scalar_start(node)
            if at is not None and new.endswith(old):
                prefix = new[: len(new) - len(old)]
                if VERBATIM.fullmatch(prefix) and (node.style or not prefix.startswith("-")):
                    self.edits.append((at, at, prefix))
                    return
            elif at is not None and old.endswith(new) and (new or node.style):
                prefix = old[: len(old) - len(new)]
                if self.text.startswith(prefix, at):
                    self.edits.append((at, at + len(prefix), ""))
                    return
        if node.style in ("|", ">"):
            raise Unsupported("a block scalar (| or >) would change other than at its start: "
                              "write it as a quoted string")  # fmt: skip
        self._replace(node, _scalar(new, node.style, flow))

    def _scalar_start(self, node: yaml.ScalarNode) -> int | None:
        """Where a scalar's value starts in the text; None where that is not one place (a
        block scalar whose first line is empty or set by an indentation indicator)."""
        start = node.start_mark.index
        if node.style in ("'", '"'):
            return start + 1
        if node.style not in ("|", ">"):
            return start
        header_end = self.text.find("\n", start)
        header = self.text[start:header_end].split("#", 1)[0].strip()
        if header_end < 0 or any(c.isdigit() for c in header):
            return None
        line = header_end + 1
        end = self.text.find("\n", line)
        content = self.text[line : end if end >= 0 else len(self.text)].rstrip("\r")
        if not content.strip(" "):
            return None
        return line + len(content) - len(content.lstrip(" "))

    def _replace(self, node: yaml.Node, text: str) -> None:
        start, end = node.start_mark.index, node.end_mark.index
        if start == end and not self.text[start - 1 : start].isspace():
            text = " " + text  # an empty value (`key:`) written after its colon
        self.edits.append((start, end, text))

    def _style(self, node: yaml.Node) -> bool:
        """Whether the document indents block lists under their key (kubectl does not)."""
        for key_node, value_node in node.value:
            if isinstance(value_node, yaml.SequenceNode) and not value_node.flow_style:
                return self._dash(value_node, 0) > key_node.start_mark.column
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


def _keeps_breaks(text: str, node: yaml.Node) -> bool:
    """A block scalar with keep chomping (``|+``, ``>+``), ending in a line break."""
    if not (isinstance(node, yaml.ScalarNode) and node.style in ("|", ">")):
        return False
    header = text[node.start_mark.index : text.find("\n", node.start_mark.index)]
    return (
        "+" in header.split("#", 1)[0]
        and text[node.end_mark.index - 1 : node.end_mark.index] == "\n"
    )


def _merged_unchanged(own: set[Any], old: dict[str, Any], new: dict[str, Any]) -> None:
    """A mapping with a merge key (``<<: *base``) is edited only in its own entries: a value
    it takes from the merge must stay as it is (the base serves other places too)."""
    for key, value in old.items():
        if key not in own and (key not in new or new[key] != value):
            raise Unsupported(f"{key!r} comes from a merge key (<<) and would change: write "
                              "it out in the mapping itself")  # fmt: skip


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
