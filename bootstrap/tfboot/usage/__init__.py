"""The usage report: what a job used against each budget, and what to set next time.

The start-up hooks call ``watch`` each time tfboot has configured a framework. The first
call starts the process's report, unless ``TFBOOT_USAGE=off``: it takes the baseline
(``measure.Meter``), finds the process's place in its job (``job.identify``), and hooks the
process's ends (``ends``: ``atexit``, the uncaught-exception hook, SIGTERM, fork).

One daemon thread, the publisher, samples every ``TFBOOT_USAGE_INTERVAL`` seconds (the
limits, which a resize may change, and memory where no kernel peak covers it), does every
write to a sink (a snapshot where one is set, so a job killed by the OOM killer leaves its
last one), and the final record. The end of the
process builds the final record, writes its ``tfboot: used:`` line (the job's, at info
level, from the job's lead only), hands the record to the publisher and waits for it at
most ``EXIT_DEADLINE_S`` in all, however slowly a sink answers. The lock guards state
only, never file or network I/O, and a forked child gets a fresh one. Nothing here may
fail the program: a sink that fails is named in one warning and retried at the next
snapshot and at the end.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import select
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..budget import make_budget
from ..budget.roles import ALONG
from ..errors import ConfigError
from ..executor import results
from ..executor.result import emit
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
from ..values import hide_credentials
from . import ends
from .job import MAX_MEMBERS, Job, collect, gather, identify, leave, member_path
from .measure import Framework, Meter

if TYPE_CHECKING:
    from .sinks import TerminationLog

EXIT_DEADLINE_S = 5.0  # every sink at the process's end, together
EXIT_MARGIN_S = 0.25  # of it, kept for the thread to hand back before the process goes on
SNAPSHOT_PUSH_S = 2.0  # a snapshot's push, at most (the final record waits behind it)
# A SIGTERM the main thread has not handled this long after it came is stranded (ends.py).
STRANDED_S = 1.0
_lock = threading.RLock()  # guards _started, _report and a report's ``done``; never held over I/O
_report: Report | None = None
_started = False
_frameworks: list[Framework] = []  # the frameworks configured in this process, in order


class Report:
    """One process's usage report: its meter, its job, its sinks, its publisher thread."""

    def __init__(self, meter: Meter, env: Mapping[str, str], job: Job) -> None:
        self.meter = meter
        self.job = job
        self.frameworks = _frameworks
        self.level = _control(env, LOG)
        self.interval = _control(env, USAGE_INTERVAL)
        file, log = _control(env, USAGE_FILE), _control(env, TERMINATION_LOG)
        # A member whose lead collects its record writes no file of its own (its record is in
        # the lead's), unless its path holds {pid}; the file is its fallback if the drop fails.
        path = member_path(_expand(file), job) if file else None
        collected = bool(file) and "{pid}" not in file and job.parent is not None and \
            job.drop is not None  # fmt: skip
        self.file = None if collected else path
        self.fallback = path if collected else None
        log = _expand(log) if log else None
        self.termination: TerminationLog | None = None
        if log is not None and job.lead and _writable(log):  # the container's: the lead's
            from .sinks import TerminationLog

            self.termination = TerminationLog(log)
        # Metrics are the job's: pushed and written by its lead only.
        textfile = _control(env, TEXTFILE_DIR)
        self.textfile = _absolute(textfile) if textfile and job.lead else None
        self.pushgateway = _control(env, PUSHGATEWAY) if job.lead else None
        # The members' records gathered so far, by (pid, start), kept as the lead keeps them.
        self.members: dict[tuple[Any, Any], dict[str, Any]] = {}
        self.members_lock = threading.Lock()  # guards ``members`` only, never held over I/O
        self.warned: set[str] = set()
        self.exception: str | None = None
        self.waiting_for: dict[str, Any] | None = None  # a wait that ends the process in C
        self.done = False
        # The publisher's bell: a pipe, so a signal handler can ring it without a lock.
        self.bell = os.pipe()
        for end in self.bell:
            os.set_blocking(end, False)
        self.final: dict[str, Any] | None = None  # handed to the publisher at the end
        self.signalled: str | None = None  # a snapshot asked for by a signal handler
        self.signals: list[str] = []  # each signal the process got that did not end it
        # The read end of the SIGTERM watch's pipe, and what to do with a stranded SIGTERM:
        # both set by ends.py where the default action applies; SIGTERMs seen and handled.
        self.watch: int | None = None
        self.stranded: Any = None
        self.sigterms_seen = self.sigterms_handled = 0
        self.sigterm_at: float | None = None
        self.thread: threading.Thread | None = None
        self.deadline = 0.0  # when the end's publishing must be over (time.monotonic)
        exported = self.textfile or self.pushgateway
        if exported and importlib.util.find_spec("prometheus_client") is None:
            named = TEXTFILE_DIR if self.textfile else PUSHGATEWAY
            emit("warning", f"{named} is set but prometheus_client is not installed: "
                            "pip install 'tfboot[metrics]'")  # fmt: skip
            self.textfile = self.pushgateway = None

    @property
    def sinks(self) -> bool:
        return bool(self.file or self.termination or self.textfile or self.pushgateway)

    def keep(self, records: list[dict[str, Any]]) -> None:
        """Keep the members' records ``gather`` read (their files are gone), at most
        ``MAX_MEMBERS`` processes."""
        from .merge import trimmed

        with self.members_lock:
            for found in records:
                key = (found.get("pid"), found.get("started"))
                if key in self.members or len(self.members) < MAX_MEMBERS:
                    self.members[key] = trimmed(found)

    def record(self, reason: str, final: bool) -> dict[str, Any]:
        """The record so far, with the job's suggestion (its members' records merged)."""
        from .suggest import suggest  # loaded at the first record, not at the import

        with self.members_lock:
            members = list(self.members.values())
        record = self.meter.record(self.frameworks, reason, final, members)
        record["run"] = self.job.to_dict()
        record["signals"] = list(self.signals)
        if self.waiting_for is not None and not final:
            record["waiting"] = dict(self.waiting_for)
        if members:
            record["members"] = members
        record["suggest"] = suggest([record], unfinished_killed=False)
        return record

    def publish(self, record: dict[str, Any], deadline: float) -> None:
        """The record to every sink, local ones first, the push within what is left of
        ``deadline`` (``time.monotonic``). A snapshot stops at the end's start; a sink that
        fails is named once and tried again next time."""
        from . import sinks

        def push() -> None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no time left before the deadline")
            _metrics().push(self.pushgateway, record, left)

        for name, write in (
            (USAGE_FILE, lambda: self.file and sinks.write_json(self.file, record)),
            (TERMINATION_LOG, lambda: self.termination and self.termination.write(record)),
            (TEXTFILE_DIR, lambda: self.textfile and _metrics().write_textfile(self.textfile,
                                                                               record)),
            (PUSHGATEWAY, lambda: self.pushgateway and push()),
        ):  # fmt: skip
            if self.done and not record["final"]:
                return
            try:
                write()
            except Exception as exc:
                self._failed(name, exc, record["final"])
        if record["final"] and not leave(self.job, record) and self.fallback:
            try:
                sinks.write_json(self.fallback, record)
            except Exception as exc:
                self._failed(USAGE_FILE, exc, True)

    def _failed(self, name: str, exc: BaseException, final: bool) -> None:
        if final:
            emit("warning", f"usage report: the final record could not be written to {name} "
                            f"({_reason(exc)})")  # fmt: skip
        elif name not in self.warned:
            self.warned.add(name)
            emit("warning", f"usage report: {name} could not be written ({_reason(exc)}); "
                            "it is tried again at each snapshot and at the end")  # fmt: skip

    def run(self) -> None:
        """The publisher thread: a snapshot each interval (or when a signal asks), the final
        record when the end hands it over (``final`` is set before the bell). Never raises."""
        while True:
            waits = [self.bell[0]] if self.watch is None else [self.bell[0], self.watch]
            timeout = self.interval
            if self.sigterm_at is not None:
                timeout = max(0.0, min(timeout, self.sigterm_at + STRANDED_S - time.monotonic()))
            with contextlib.suppress(OSError, ValueError):
                select.select(waits, [], [], timeout)
            with contextlib.suppress(OSError):
                os.read(self.bell[0], 512)
            self._watch_sigterm()
            if self.final is not None:
                self.publish(self.final, self.deadline - EXIT_MARGIN_S)
                return
            reason, self.signalled = self.signalled, None
            if self.done:
                continue
            try:
                self.keep(gather(self.job))
                self.meter.sample()
                if self.sinks:
                    record = self.record(reason or "snapshot", final=False)
                    self.publish(record, time.monotonic() + SNAPSHOT_PUSH_S)
            except Exception as exc:
                if self.level == "debug":
                    emit("debug", f"usage report: snapshot failed ({_reason(exc)})")

    def _watch_sigterm(self) -> None:
        """A SIGTERM the C-level hook saw (it writes the watch's pipe, in whichever thread the
        kernel chose) but the main thread has not handled within ``STRANDED_S``: the main
        thread is blocked where no signal reaches it. Without tfboot's handler the signal's
        default action would already have ended the process; ``stranded`` does."""
        if self.watch is None:
            return
        if _drained(self.watch):
            self.sigterms_seen += 1
            if self.sigterm_at is None:
                self.sigterm_at = time.monotonic()
        if self.sigterm_at is None or time.monotonic() < self.sigterm_at + STRANDED_S:
            return
        self.sigterm_at = None
        if self.sigterms_seen > self.sigterms_handled and not self.done and self.stranded:
            self.stranded()

    def ring(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self.bell[1], b".")

    def snapshot(self, reason: str) -> None:
        """Ask the publisher for a snapshot now (safe in a signal handler: no lock, no I/O
        but one byte into a pipe)."""
        self.signalled = reason
        self.signals.append(f"{reason} at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
        self.ring()

    def waiting(self, seconds: float | None) -> None:
        """A wait that ends the process in C at ``seconds`` starts (no Python runs at that
        end, so no final record can come): a record naming the wait is written now, in the
        caller's thread, and read as that end should no other follow. None: it is over, and
        the publisher writes a record that no longer names it."""
        if seconds is None:
            self.waiting_for = None
            self.ring()
            return
        self.waiting_for = {"limit": "DIST_STARTUP_TIMEOUT", "seconds": seconds}
        if self.sinks and not self.done:
            self.publish(self.record("waiting for peers", final=False),
                         time.monotonic() + SNAPSHOT_PUSH_S)  # fmt: skip

    def finish(self, reason: str) -> None:
        """The final report, once, in the process that started it, within the deadline."""
        if os.getpid() != self.meter.pid:
            return  # a forked child: its parent reports
        with _lock:
            if self.done:
                return
            self.done = True
        self.deadline = time.monotonic() + EXIT_DEADLINE_S
        self.keep(collect(self.job))
        record = self.record(self.exception or reason, final=True)
        if self.level != "quiet" and (self.job.lead or self.level == "debug"):
            from .sinks import used_line

            emit("info" if self.job.lead else "debug", used_line(record))
        if self.thread is None or not self.thread.is_alive():
            return
        if threading.current_thread() is self.thread:  # a stranded SIGTERM's end
            self.publish(record, self.deadline - EXIT_MARGIN_S)
            return
        self.final = record
        self.ring()
        self.thread.join(max(0.0, self.deadline - time.monotonic()))
        if self.thread.is_alive():
            emit("warning", f"usage report: the sinks did not finish within {EXIT_DEADLINE_S:g} s "
                            "at the end; the process ends without waiting longer")  # fmt: skip


def _drained(fd: int) -> bool:
    """Read a non-blocking pipe empty; whether it held anything."""
    found = False
    with contextlib.suppress(OSError):
        while os.read(fd, 65536):
            found = True
    return found


def _writable(path: str) -> bool:
    """A termination log is used where it exists and can be written (the kubelet creates
    it; tfboot never does)."""
    return os.path.isfile(path) and os.access(path, os.W_OK)


def _metrics() -> Any:
    from . import metrics

    return metrics


def _reason(exc: BaseException) -> str:
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return hide_credentials(text.splitlines()[0][:200])


def _control(env: Mapping[str, str], name: str) -> Any:
    """A control variable; an invalid one (reported with the settings) counts as unset."""
    try:
        return read_control(env, name)
    except ConfigError:
        return next(v.default for v in CONTROL if v.name == name)


def _expand(path: str) -> str:
    """``{pid}`` and ``{host}`` in a path, made absolute against the working directory of
    now, when the report starts: a job that changes directory later (Hydra does) still
    writes every record to the one place."""
    return _absolute(path.replace("{pid}", str(os.getpid())).replace("{host}", os.uname().nodename))


def _absolute(path: str) -> str:
    """``path`` against the working directory of now; as it is where that is gone."""
    try:
        return os.path.abspath(path)
    except OSError:
        return path


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
            _frameworks.append(Framework(adapter, name))
            first, _started = not _started, True
        if first:
            report = _start(result, env)  # reads files: outside the lock
            with _lock:
                _report = report
    except Exception as exc:
        if _control(env, LOG) == "debug":
            emit("debug", f"usage report not started: {_reason(exc)}")


def _start(result: Any, env: Mapping[str, str]) -> Report | None:
    """The process's report, or None under ``TFBOOT_USAGE=off``."""
    if not _control(env, USAGE):
        return None
    budget = make_budget(result.settings, env, result.role)
    threads = budget.threads(result.framework).count
    meter = Meter(budget, threads, env, _control(env, METRICS_JOB), result.framework)
    report = Report(meter, env, identify(env))
    report.thread = threading.Thread(target=report.run, name="tfboot-usage", daemon=True)
    ends.hook(report)  # first: the publisher waits on what it sets up
    report.thread.start()
    return report


def _after_fork_in_child() -> None:
    """A forked child starts with a free lock and no report of its own: the parent's is the
    parent's (its thread did not survive the fork)."""
    global _lock, _report, _started
    _lock = threading.RLock()
    if _report is not None:
        for end in _report.bell:
            with contextlib.suppress(OSError):
                os.close(end)
    _report, _started = None, False
    _frameworks.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
