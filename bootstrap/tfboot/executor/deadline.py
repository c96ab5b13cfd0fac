"""The startup deadline (``DIST_STARTUP_TIMEOUT``): a group forms in time, or the task ends.

PyTorch has one ``timeout`` for the rendezvous and every collective after it, so tfboot
leaves it alone and bounds the wait alone: each call of ``init_process_group`` must return
within ``DIST_STARTUP_TIMEOUT`` seconds of its own start. The work before it (loading data,
building the model) and after it (training, a second group formed later) is never counted.
When the seconds run out, a thread names what the task waited for on stderr and ends it
with exit status 1; the thread is told to stand down once the call returns or raises.
PyTorch's store waits with the interpreter lock released, so the thread runs. Nothing of
the program's is armed or replaced (``faulthandler``'s watchdog stays the program's).
Before it ends the task, what a layer above registered with ``on_end`` runs (the usage
report's final record, so that the end is read as the deadline's, never as a kill).

TensorFlow holds the interpreter lock while it waits for its peers in C++, so no Python
thread can end its task, nor write its final usage record then. ``within`` brackets the
call in which it waits (the watcher's clock and end are armed as it starts, and stood down
as it returns or raises), and what a layer above registered with ``on_wait`` is told as
the wait starts and ends (the usage report writes a record that names the wait, so a task
ended in it is read as the deadline's end, never as a kill). ``exit_later`` arms a POSIX
timer whose expiry runs the C library's ``_exit`` in a thread of the C library's own
(``SIGEV_THREAD``): no interpreter lock, no signal, nothing of the program's replaced
(``faulthandler``'s one watchdog stays the program's; it is the fallback only where the C
library lacks such timers).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from ..frames import hidden
from ..values import line

EXIT_STATUS = 1  # as TensorFlow's task at DIST_STARTUP_TIMEOUT
REASON = "DIST_STARTUP_TIMEOUT"  # the end's name, for what runs before it
_ending: list[Callable[[str], None]] = []
_waits: list[Callable[[float | None], None]] = []


def on_end(callback: Callable[[str], None]) -> None:
    """Run ``callback(REASON)`` before a deadline ends the process."""
    _ending.append(callback)


def on_wait(callback: Callable[[float | None], None]) -> None:
    """Run ``callback(seconds)`` as a wait that ends the process in C after ``seconds``
    starts, ``callback(None)`` once it is over (no Python runs at such an end)."""
    _waits.append(callback)


def waiting(seconds: float | None) -> None:
    """Tell the ``on_wait`` callbacks a bounded wait starts (``seconds``) or ended (None)."""
    for callback in _waits:
        with contextlib.suppress(Exception):
            callback(seconds)


def within(function: Callable[..., Any], begin: Callable[[], None],
           end: Callable[[], None]) -> Callable[..., Any]:  # fmt: skip
    """``function`` with ``begin()`` before each call and ``end()`` after it, however it ends."""

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        begin()
        try:
            with hidden:
                return function(*args, **kwargs)
        finally:
            end()

    return call


def bounded(function: Callable[..., Any], seconds: float, text: str) -> Callable[..., Any]:
    """``function`` ending the process unless each call returns within ``seconds`` of its
    start, after writing ``text`` as tfboot's error line."""

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        done = threading.Event()

        def expire() -> None:
            if done.wait(seconds):
                return
            try:
                sys.stderr.write(line("error", text) + "\n")
                sys.stderr.flush()
                for callback in _ending:
                    with contextlib.suppress(Exception):
                        callback(REASON)
            finally:
                os._exit(EXIT_STATUS)

        threading.Thread(target=expire, name="tfboot-deadline", daemon=True).start()
        try:
            with hidden:
                return function(*args, **kwargs)
        finally:
            done.set()

    return call


CLOCK_MONOTONIC, SIGEV_THREAD = 1, 2  # <time.h>, <signal.h> (Linux)


class _SigEvent(ctypes.Structure):
    """``struct sigevent`` for ``SIGEV_THREAD`` (64 bytes on Linux)."""

    _fields_ = (("value", ctypes.c_void_p), ("signo", ctypes.c_int), ("notify", ctypes.c_int),
                ("function", ctypes.c_void_p), ("attribute", ctypes.c_void_p),
                ("pad", ctypes.c_byte * 32))  # fmt: skip


class _TimeSpec(ctypes.Structure):
    _fields_ = (("seconds", ctypes.c_long), ("nanoseconds", ctypes.c_long))


class _ITimerSpec(ctypes.Structure):
    _fields_ = (("interval", _TimeSpec), ("value", _TimeSpec))


def _timers() -> Any:
    """The C library that has ``timer_create`` (glibc 2.34 and later; librt before, looked
    for only then: ``find_library`` runs ``ldconfig``)."""
    library = ctypes.CDLL(None, use_errno=True)
    if hasattr(library, "timer_create"):
        return library
    found = ctypes.util.find_library("rt")
    library = ctypes.CDLL(found, use_errno=True) if found else None
    return library if hasattr(library, "timer_create") else None


def exit_later(seconds: float, status: int) -> Callable[[], None]:
    """End the process with ``status`` once ``seconds`` have passed, unless the returned
    cancel ran first; no interpreter lock is needed at the end."""
    with contextlib.suppress(OSError, TypeError):
        libc = _timers()
        if libc is not None:
            timer = ctypes.c_void_p()
            event = _SigEvent(value=status, notify=SIGEV_THREAD,
                              function=ctypes.cast(libc._exit, ctypes.c_void_p).value)  # fmt: skip
            if libc.timer_create(CLOCK_MONOTONIC, ctypes.byref(event), ctypes.byref(timer)) == 0:
                whole = int(seconds)
                spec = _ITimerSpec(value=_TimeSpec(whole, int((seconds - whole) * 1e9)))
                if libc.timer_settime(timer, 0, ctypes.byref(spec), None) == 0:
                    return functools.partial(libc.timer_delete, timer)
                libc.timer_delete(timer)
    import faulthandler

    sink = open(os.devnull, "w")  # noqa: SIM115 - held open while the watchdog is armed
    faulthandler.dump_traceback_later(seconds, exit=True, file=sink)
    return faulthandler.cancel_dump_traceback_later
