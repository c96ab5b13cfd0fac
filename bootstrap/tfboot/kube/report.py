"""The findings of a run and how they are printed: one line each, or one JSON object."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field

from .rules import ERROR, NOTE, RULES, WARNING


@dataclass(frozen=True)
class Finding:
    """One problem: where, which rule, what is wrong and how to fix it."""

    file: str
    object: str
    container: str
    rule: str
    severity: str
    message: str
    hint: str = ""

    def line(self) -> str:
        fix = f" (fix: {self.hint})" if self.hint else ""
        return (
            f"{self.file}: {self.object}: {self.container}: "
            f"{self.severity} {self.rule}: {self.message}{fix}"
        )


@dataclass
class Report:
    """Findings collected for one container (``where``), then for the whole run."""

    findings: list[Finding] = field(default_factory=list)
    objects: int = 0
    containers: int = 0

    def add(self, where: tuple[str, str, str], rule: str, message: str, hint: str = "") -> None:
        self.findings.append(Finding(*where, rule, RULES[rule][0], message, hint))

    def count(self, severity: str) -> int:
        return sum(1 for f in self.findings if f.severity == severity)

    def failed(self, strict: bool) -> bool:
        """Any error, or any warning under ``strict``."""
        return bool(self.count(ERROR) or (strict and self.count(WARNING)))


def print_report(report: Report, as_json: bool) -> None:
    """The findings on stdout (one JSON object, or one line each with a summary on stderr)."""
    errors, warnings = report.count(ERROR), report.count(WARNING)
    if as_json:
        summary = {"errors": errors, "warnings": warnings, "objects": report.objects,
                   "containers": report.containers}  # fmt: skip
        print(json.dumps({"findings": [asdict(f) for f in report.findings], "summary": summary}))
        return
    for finding in report.findings:
        print(finding.line())
    notes = report.count(NOTE)
    print(
        f"tfboot manifests: {errors} error(s), {warnings} warning(s)"
        f"{f', {notes} note(s)' if notes else ''} in "
        f"{report.containers} container(s) of {report.objects} object(s)",
        file=sys.stderr,
    )
