"""Containers whose command runs Python so that ``PYTHONPATH`` or ``site`` is ignored
(``-I``, ``-E``, ``-S``): the injected hook cannot reach them.

The words after a ``python`` executable are read as CPython 3.10+ reads its command line:
short options cluster (``-IE``), ``-W`` and ``-X`` take a value (``-Wignore`` or the next
word), ``--check-hash-based-pycs`` too, and ``-c``, ``-m``, ``-``, ``--`` or the script's
name end the options (what follows is the program's own).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Mapping
from typing import Any

_PYTHON = re.compile(r"(?:^|.*/)python[0-9.]*$")
_VALUED = "WX"  # short options whose value is the rest of the word or the next word
_LAST = "cm"  # short options that end the options: the rest is the program's
_LONG_VALUED = ("--check-hash-based-pycs",)
_WHY = {"I": "-I (isolated: PYTHONPATH ignored)", "E": "-E (PYTHON* variables ignored)",
        "S": "-S (no site: no start-up hook at all)"}  # fmt: skip


def ignored_by(container: Mapping[str, Any], pth: bool = False) -> list[str]:
    """The options in the container's command and args that keep the hook out, described;
    with the ``.pth`` way (``pth``), only ``-S`` does."""
    words = _words(container)
    found: set[str] = set()
    for index, word in enumerate(words):
        if _PYTHON.match(word):
            found |= _options(words[index + 1 :])
    return [_WHY[f] for f in ("S" if pth else "IES") if f in found]


def _words(container: Mapping[str, Any]) -> list[str]:
    """The command and args as words; a word with spaces (a shell script) split as the
    shell would, its operators (``;``, ``&&``, ``|``) words of their own."""
    words: list[str] = []
    for word in (str(w) for key in ("command", "args") for w in container.get(key) or []):
        words += _shell_words(word) if " " in word else [word]
    return words


def _shell_words(script: str) -> list[str]:
    lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:  # unbalanced quotes: the plain words
        return script.split()


def _options(words: list[str]) -> set[str]:
    """The short options CPython takes from ``words`` (those after the executable)."""
    found: set[str] = set()
    taken = iter(words)
    for word in taken:
        if word in _LONG_VALUED:
            next(taken, None)
        elif word.startswith("--") and word != "--":
            continue  # --version, --help, --check-hash-based-pycs=VALUE
        elif not word.startswith("-") or word in ("-", "--"):
            break  # the script, stdin or the end of the options
        else:
            flags, ended = _cluster(word[1:], taken)
            found |= flags
            if ended:
                break
    return found


def _cluster(letters: str, rest: Iterator[str]) -> tuple[set[str], bool]:
    """The flags of one word of short options; whether it ended the options (``-c``,
    ``-m``). A ``-W``/``-X`` with no value in the word takes the next word."""
    flags: set[str] = set()
    for index, letter in enumerate(letters):
        if letter in _LAST:
            return flags, True
        if letter in _VALUED:
            if index == len(letters) - 1:
                next(rest, None)
            return flags, False
        flags.add(letter)
    return flags, False


ADVICE = (
    "drop the option, or name the image's site-packages in the annotation "
    "tfboot/site-packages, so a .pth file starts tfboot there (docs/inject.md); under -S "
    "nothing can start it"
)
