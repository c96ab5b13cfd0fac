"""How a process ends, and the report's part in each: the exit, an uncaught exception, SIGTERM.

The exit status and the signal's disposition stay exactly what they would be without
tfboot. ``atexit`` reports a normal end, ``sys.exit`` and an uncaught exception (named by a
chained ``sys.excepthook``; the program's hook still prints); ``executor.deadline`` the end
``DIST_STARTUP_TIMEOUT`` gives a PyTorch task, as ``DIST_STARTUP_TIMEOUT``; a TensorFlow
task, which that end leaves no Python to report, by a record written as its wait starts.
SIGTERM, where the program has no handler of its own yet: the final report, then the
signal again with its default action, so the process still ends by it. Where the program
had a handler before the framework's import: a snapshot is asked for (no I/O in the
handler), then the program's handler runs and decides; one installed later simply
replaces tfboot's. A forked child gets the disposition that was there before tfboot. A
process that ignores SIGTERM keeps ignoring it (no handler is installed), and so does PID 1
with no handler (the kernel drops a signal PID 1 does not handle): it gets a snapshot and
goes on, and its real end is reported at exit. tfboot's part of a handler never raises into
the program, whatever stderr is.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import time
from typing import Any

PID1_IGNORED = "SIGTERM (ignored: PID 1 without a handler)"


def hook(report: Any) -> None:
    """Hook the process's ends for ``report`` (an ``usage.Report``)."""
    from ..executor.deadline import on_end, on_wait

    atexit.register(_quietly, report.finish, "exit")
    on_end(report.finish)  # DIST_STARTUP_TIMEOUT ends the task with os._exit: no atexit
    on_wait(report.waiting)  # ... or in C, where no Python runs: named as the wait starts
    _chain_excepthook(report)
    _on_sigterm(report)


def _quietly(call: Any, *args: Any) -> None:
    """Run tfboot's part of an end; whatever goes wrong stays inside tfboot."""
    with contextlib.suppress(Exception):
        call(*args)


def _chain_excepthook(report: Any) -> None:
    """Name an uncaught exception in the final record; the program's hook still runs."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, trace: Any) -> None:
        report.exception = f"exception {kind.__name__}"
        previous(kind, value, trace)

    sys.excepthook = hook


def _on_sigterm(report: Any) -> None:
    """Install the SIGTERM handler where it changes nothing of the program's own: signal
    handlers can only be set from the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous == signal.SIG_IGN or previous is None:
        return
    if previous == signal.SIG_DFL and _native_handler(signal.SIGTERM):
        return  # the program's faulthandler.register(SIGTERM), or a library's, stays in force

    def handler(signum: int, frame: Any) -> None:
        report.sigterms_handled += 1  # the watch for a stranded SIGTERM stands down
        ours = os.getpid() == report.meter.pid  # not a forked child's
        if callable(previous):
            if ours:
                _quietly(report.snapshot, "SIGTERM")
            previous(signum, frame)  # the program's: what it raises is the program's
            return
        if os.getpid() == 1:  # the default action of PID 1 is to ignore it
            if ours:
                _quietly(report.snapshot, PID1_IGNORED)
            return
        if ours:
            _quietly(report.finish, "SIGTERM")
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, handler)
    watch = (
        _watch_stranded(report, handler) if os.getpid() != 1 and not callable(previous) else None
    )
    _forks_get_the_program_s(handler, previous, watch)


def _native_handler(signum: int) -> bool:
    """Whether ``signum`` has a handler below Python's (``faulthandler.register``, a native
    library's) while Python holds its default: the C-level disposition, read by
    ``sigaction``, is not ``SIG_DFL``. False where it cannot be read."""
    import ctypes

    action = ctypes.create_string_buffer(256)  # struct sigaction; its handler comes first
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.sigaction(signum, None, action) != 0:
            return False
    except (OSError, AttributeError):
        return False
    return ctypes.c_void_p.from_buffer(action).value not in (None, 0)


def _watch_stranded(report: Any, handler: Any) -> tuple[int, int] | None:
    """Where the signal's default action would end the process, make sure a SIGTERM still
    does when the main thread cannot run the handler (blocked in C where the signal does not
    reach it, as when the kernel hands it to another thread): a C-level hook,
    ``faulthandler``'s, chained to Python's own handler, writes a pipe in whichever thread
    takes the signal, and the publisher thread watches it (``Report._watch_sigterm``). The
    signal wakeup fd stays free for asyncio, Trio or the program. The pipe, or None."""
    import faulthandler

    try:
        pipe = os.pipe()
        for end in pipe:
            os.set_blocking(end, False)  # the hook never blocks: a full pipe drops its text
    except OSError:
        return None
    try:
        faulthandler.register(signal.SIGTERM, file=pipe[1], all_threads=True, chain=True)
    except (OSError, RuntimeError, ValueError):
        for end in pipe:
            os.close(end)
        return None

    def stranded() -> None:
        if signal.getsignal(signal.SIGTERM) is not handler or os.getpid() != report.meter.pid:
            return  # the program took SIGTERM over, or a fork: not tfboot's to end
        _quietly(report.finish, "SIGTERM")
        _die_by_sigterm()

    report.watch, report.stranded = pipe[0], stranded  # before the publisher starts
    return pipe


def _unwatch(watch: tuple[int, int]) -> None:
    """A forked child's end of the parent's watch: the hook unregistered (the child's
    signals are not the parent's), then the disposition Python holds set again at the OS
    level (unregistering puts back Python's C handler, whatever the program set since)."""
    import faulthandler

    with contextlib.suppress(OSError, RuntimeError, ValueError, TypeError):
        faulthandler.unregister(signal.SIGTERM)
        current = signal.getsignal(signal.SIGTERM)
        if current is not None:
            signal.signal(signal.SIGTERM, current)
    for end in watch:
        with contextlib.suppress(OSError):
            os.close(end)


def _die_by_sigterm() -> None:
    """End the process by SIGTERM's default action, from a thread that is not the main one
    (where Python cannot reset the disposition): through libc's ``signal``."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal(signal.SIGTERM, 0)  # SIG_DFL
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1.0)  # the signal is on its way (another thread may take it)
    finally:
        os._exit(128 + signal.SIGTERM)  # as a shell reports a process ended by it


def _forks_get_the_program_s(handler: Any, previous: Any, watch: tuple[int, int] | None) -> None:
    """A forked child gets SIGTERM's disposition as it was before tfboot (it reports
    nothing of its own). SIGTERM is blocked across the fork: a Python handler inherited
    by the child would lose a signal that arrives before the child's interpreter has
    settled (CPython clears the pending flags after a fork), where the default action
    would have ended it; blocked, it waits and then takes the restored disposition."""
    blocked = {signal.SIGTERM}

    def before() -> None:
        with contextlib.suppress(OSError, ValueError):
            signal.pthread_sigmask(signal.SIG_BLOCK, blocked)

    def after_in_parent() -> None:
        with contextlib.suppress(OSError, ValueError):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)

    def after_in_child() -> None:
        if watch is not None:  # first: unregistering puts back Python's C handler
            _unwatch(watch)
        with contextlib.suppress(OSError, ValueError, TypeError):
            if signal.getsignal(signal.SIGTERM) is handler:
                signal.signal(signal.SIGTERM, previous)
        after_in_parent()

    os.register_at_fork(before=before, after_in_parent=after_in_parent,
                        after_in_child=after_in_child)  # fmt: skip
