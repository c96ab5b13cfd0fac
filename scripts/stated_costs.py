"""The README's stated costs of the test command, held against what a run measured.

The README states, for ``bash scripts/test.sh``: how many tests it runs, how long it takes
on a 2-core machine, how much disk the clone grows to and how much the Docker images take.
``scripts/test.sh`` calls this at the end of a full run with what that run measured; it
prints each figure beside the stated one, and fails the run when the test count is off by
more than ``COUNT_SLACK`` (a count is exact: the README must follow the suite). Time and disk
depend on the machine and its caches: a figure off by more than ``SLACK`` is printed as a
warning naming the sentence to update, and never fails a run.

    python scripts/stated_costs.py --junit .cache/junit.xml --seconds 1500 --root .
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
COUNT_SLACK = 0.03  # of the stated count
SLACK = 0.5  # of a stated time or size, either way


@dataclass(frozen=True)
class Stated:
    """What the README says the test command costs."""

    tests: int
    minutes: tuple[int, ...]  # every "about N min" said of the whole command
    clone_gb: float
    images_gb: float


def stated(text: str) -> Stated:
    """The figures of the README's sentences about the test command; ValueError naming the
    one that is missing."""

    def one(pattern: str, what: str) -> str:
        found = re.search(pattern, text)
        if found is None:
            raise ValueError(f"README.md no longer states {what} (looked for {pattern!r})")
        return found.group(1)

    minutes = tuple(int(m) for m in re.findall(r"about (\d+) min(?:utes)?\b", text))
    if not minutes:
        raise ValueError("README.md no longer states how long the test command takes")
    return Stated(
        tests=int(one(r"\b(\d+) tests in\b", "the test count ('N tests in')")),
        minutes=minutes,
        clone_gb=float(one(r"clone grows to about ([\d.]+) GB", "the clone's size")),
        images_gb=float(one(r"images take about ([\d.]+) GB", "the images' size")),
    )


def ran(junit: Path) -> int:
    """How many tests a run collected, from pytest's JUnit XML."""
    root = ElementTree.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    return sum(int(s.get("tests", 0)) for s in suites)


def gigabytes(command: list[str]) -> float | None:
    """The total of the sizes a command prints, one a line (``du -sb``'s bytes, ``docker
    system df``'s ``6.4GB``), in GB (None: not measured)."""
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=300).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    total = 0.0
    for line in out.splitlines():
        size = re.match(r"\s*([\d.]+)\s*([kMG]?B)?", line)
        if size:
            unit = {"kB": 1e3, "MB": 1e6, "GB": 1e9, "B": 1}.get(size.group(2) or "B", 1)
            total += float(size.group(1)) * unit
    return total / 1e9 if total else None


def compare(claims: Stated, tests: int, seconds: float, clone_gb: float | None,
            images_gb: float | None) -> tuple[list[str], bool]:  # fmt: skip
    """The lines to print, and whether the run holds the README (the count within slack)."""
    lines, holds = [], True
    off = abs(tests - claims.tests) / claims.tests
    if off > COUNT_SLACK:
        holds = False
        lines.append(f"README.md states {claims.tests} tests; this run collected {tests}: "
                     "update the Development section's count")  # fmt: skip
    else:
        lines.append(f"tests: {tests} collected, README.md states {claims.tests}")
    minutes = seconds / 60
    for said in sorted(set(claims.minutes)):
        note = "" if abs(minutes - said) <= SLACK * said else " (warning: update README.md)"
        lines.append(f"time: {minutes:.0f} min, README.md says about {said} min{note}")
    for what, found, said in (("clone", clone_gb, claims.clone_gb),
                              ("images", images_gb, claims.images_gb)):  # fmt: skip
        if found is None:
            lines.append(f"{what}: not measured here, README.md says about {said:g} GB")
            continue
        note = "" if abs(found - said) <= SLACK * said else " (warning: update README.md)"
        lines.append(f"{what}: {found:.1f} GB, README.md says about {said:g} GB{note}")
    return lines, holds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--junit", type=Path, required=True, help="pytest's --junitxml file")
    parser.add_argument("--seconds", type=float, required=True, help="the whole command's time")
    parser.add_argument("--root", type=Path, default=Path("."), help="the clone, for its size")
    args = parser.parse_args()
    try:
        claims = stated(README.read_text())
        tests = ran(args.junit)
    except (OSError, ValueError, ElementTree.ParseError) as error:
        print(f"stated costs: {error}", file=sys.stderr)
        return 1
    clone = gigabytes(["du", "-sb", str(args.root)])
    images = gigabytes(["docker", "system", "df", "--format",
                        '{{if eq .Type "Images"}}{{.Size}}{{end}}'])  # fmt: skip
    lines, holds = compare(claims, tests, args.seconds, clone, images)
    for line in lines:
        print(f"stated costs: {line}", file=sys.stderr)
    return 0 if holds else 1


if __name__ == "__main__":
    sys.exit(main())
