"""The usage report: what a job used against each budget, and what to set next time.

The start-up hooks call ``watch`` each time tfboot has configured a framework. The first
call starts the process's report, unless ``TFBOOT_USAGE=off``: it takes the baseline
(``measure.Meter``), registers an ``atexit`` handler (a normal end, ``sys.exit``, an
uncaught exception), and a SIGTERM handler (how Kubernetes and Slurm stop a job) that
reports, then hands the signal on: to the handler that was there, or to the default, so
the process still ends by the signal. Where a sink is set (``TFBOOT_USAGE_FILE``, the
termination log, ``TFBOOT_TEXTFILE_DIR``, ``TFBOOT_PUSHGATEWAY``) or the kernel keeps no
memory peak, a daemon thread refreshes them every ``TFBOOT_USAGE_INTERVAL`` seconds, so a
job killed by the OOM killer (no handler runs on SIGKILL) leaves its last snapshot.

At the end one ``tfboot: used:`` line goes to stderr (at ``TFBOOT_LOG`` info or debug) and
the final record to every sink. Nothing here may fail the program: a sink that fails is
named in one warning and skipped from then on.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import signal
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..budget import make_budget
from ..budget.roles import ALONG
from ..errors import ConfigError
from ..executor import environ, results
from ..executor.result import emit
from ..provenance import TFBOOT, writer
from ..settings import (
    CONTROL,
    LOG,
    METRICS_JOB,
    PUSHGATEWAY,
    TERMINATION_LOG,
    TEXTFILE_DIR,
    USAGE,
    USAGE_FILE,
    USAGE_INTERVAL,
    read_control,
)
from .measure import Framework, Meter

if TYPE_CHECKING:
    from .sinks import TerminationLog

# The process whose report owns the file sinks; a child process that inherits it (a
# DataLoader worker, a launcher's child) writes none of them unless their paths hold {pid}.
OWNER = "TFBOOT_USAGE_OWNER"
_lock = threading.RLock()
_report: Report | None = None
_started = False


class Report:
    """One process's usage report: its meter, its sinks, its thread."""

    def __init__(self, meter: Meter, env: Mapping[str, str]) -> None:
        self.meter = meter
        self.frameworks: list[Framework] = []
        self.level = _control(env, LOG)
        self.interval = _control(env, USAGE_INTERVAL)
        file, textfile, pushgateway = (_control(env, n) for n in (USAGE_FILE, TEXTFILE_DIR,
                                                                   PUSHGATEWAY))  # fmt: skip
        log = _control(env, TERMINATION_LOG)
        usable = log is not None and _writable(_expand(log, True) or "")
        # Only a sink that is there makes this process claim them (and write OWNER).
        owner = _owner(env) if file or usable or textfile or pushgateway else True
        self.file = _expand(file, owner)
        log = _expand(log, owner) if usable else None
        self.termination: TerminationLog | None = None
        if log is not None:
            from .sinks import TerminationLog

            self.termination = TerminationLog(log)
        self.textfile = textfile if owner else None
        self.pushgateway = pushgateway if owner else None
        self.failed: set[str] = set()
        self.exception: str | None = None
        self.done = False
        self.stop = threading.Event()
        exported = self.textfile or self.pushgateway
        if exported and importlib.util.find_spec("prometheus_client") is None:
            named = TEXTFILE_DIR if self.textfile else PUSHGATEWAY
            emit("warning", f"{named} is set but prometheus_client is not installed: "
                            "pip install 'tfboot[metrics]'")  # fmt: skip
            self.textfile = self.pushgateway = None

    @property
    def refreshed(self) -> bool:
        """Whether a thread refreshes the sinks (or samples memory without a kernel peak)."""
        sinks = self.file or self.termination or self.textfile or self.pushgateway
        return bool(sinks) or self.meter.sampled is not None

    def record(self, reason: str, final: bool) -> dict[str, Any]:
        from .suggest import suggest  # loaded at the first record, not at the import

        record = self.meter.record(self.frameworks, reason, final)
        record["suggest"] = suggest([record], unfinished_killed=False)
        return record

    def publish(self, record: dict[str, Any]) -> None:
        """The record to every sink; a sink that fails is named once and skipped after."""
        from . import sinks

        for name, write in (
            (USAGE_FILE, lambda: self.file and sinks.write_json(self.file, record)),
            (TERMINATION_LOG, lambda: self.termination and self.termination.write(record)),
            (TEXTFILE_DIR, lambda: self.textfile and _metrics().write_textfile(self.textfile,
                                                                               record)),
            (PUSHGATEWAY, lambda: self.pushgateway and _metrics().push(self.pushgateway, record)),
        ):  # fmt: skip
            if name in self.failed:
                continue
            try:
                write()
            except Exception as exc:
                self.failed.add(name)
                emit("warning", f"usage report: {name} could not be written ({_reason(exc)}); "
                                "it is skipped from now on")  # fmt: skip

    def refresh(self) -> None:
        """The thread: sample, and refresh the sinks, every interval until the end."""
        while not self.stop.wait(self.interval):
            with _lock:
                if self.done:
                    return
                self.meter.sample()
                self.publish(self.record("snapshot", final=False))

    def finish(self, reason: str) -> None:
        """The final report, once, in the process that started it."""
        with _lock:
            if self.done or os.getpid() != self.meter.pid:
                return
            self.done = True
            self.stop.set()
            record = self.record(self.exception or reason, final=True)
            if self.level != "quiet":
                from .sinks import used_line

                emit("info", used_line(record))
            self.publish(record)


def _writable(path: str) -> bool:
    """A termination log is used where it exists and can be written (the kubelet creates
    it; tfboot never does)."""
    return os.path.isfile(path) and os.access(path, os.W_OK)


def _metrics() -> Any:
    from . import metrics

    return metrics


def _reason(exc: BaseException) -> str:
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]


def _control(env: Mapping[str, str], name: str) -> Any:
    """A control variable; an invalid one (reported with the settings) counts as unset."""
    try:
        return read_control(env, name)
    except ConfigError:
        return next(v.default for v in CONTROL if v.name == name)


def _expand(path: str | None, owner: bool) -> str | None:
    """``{pid}`` and ``{host}`` in a path; a path without ``{pid}`` only for the owner."""
    if not path:
        return None
    if "{pid}" not in path and not owner:
        return None
    return path.replace("{pid}", str(os.getpid())).replace("{host}", os.uname().nodename)


def _owner(env: Mapping[str, str]) -> bool:
    """Whether this process owns the file sinks: no process before it in this environment
    claimed them (a claim is tfboot's write of ``OWNER``, inherited by children)."""
    if writer(env, OWNER) == TFBOOT and env.get(OWNER) != str(os.getpid()):
        return False
    if env is os.environ:
        environ.setenv(OWNER, str(os.getpid()))
    return True


def watch(adapter: Any, name: str, env: Mapping[str, str] | None = None) -> None:
    """Report the usage of the framework imported as ``name`` at the process's end, when
    tfboot configured it. Never raises."""
    global _report, _started
    env = os.environ if env is None else env
    try:
        result = results().get(name)
        if result is None or not result.applied or (result.role and result.role.kind == ALONG):
            return
        with _lock:
            if not _started:
                _started = True
                _report = _start(result, env)
            if _report is not None:
                _report.frameworks.append(Framework(adapter, name))
    except Exception as exc:
        if _control(env, LOG) == "debug":
            emit("debug", f"usage report not started: {_reason(exc)}")


def _start(result: Any, env: Mapping[str, str]) -> Report | None:
    """The process's report, or None under ``TFBOOT_USAGE=off``."""
    if not _control(env, USAGE):
        return None
    budget = make_budget(result.settings, env, result.role)
    threads = budget.threads(result.framework).count
    report = Report(Meter(budget, threads, env, _control(env, METRICS_JOB)), env)
    atexit.register(report.finish, "exit")
    _chain_excepthook(report)
    _on_sigterm(report)
    if report.refreshed:
        threading.Thread(target=report.refresh, name="tfboot-usage", daemon=True).start()
    return report


def _chain_excepthook(report: Report) -> None:
    """Name an uncaught exception in the final record; the program's hook still runs."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, trace: Any) -> None:
        report.exception = f"exception {kind.__name__}"
        previous(kind, value, trace)

    sys.excepthook = hook


def _on_sigterm(report: Report) -> None:
    """Report on SIGTERM, then let the signal do what it did before. A program that ignores
    SIGTERM keeps ignoring it; signal handlers can only be set from the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous == signal.SIG_IGN or previous is None:
        return

    def handler(signum: int, frame: Any) -> None:
        if callable(previous):
            with _lock:  # the program's own handler decides; its end is reported at exit
                report.publish(report.record("SIGTERM", final=False))
            previous(signum, frame)
            return
        report.finish("SIGTERM")
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, handler)
