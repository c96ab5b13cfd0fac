"""PyTorch's startup deadline (``DIST_STARTUP_TIMEOUT``): a group forms in time, or the task ends.

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
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from ..values import line

EXIT_STATUS = 1  # as TensorFlow's task at DIST_STARTUP_TIMEOUT
REASON = "DIST_STARTUP_TIMEOUT"  # the end's name, for what runs before it
_ending: list[Callable[[str], None]] = []


def on_end(callback: Callable[[str], None]) -> None:
    """Run ``callback(REASON)`` before a deadline ends the process."""
    _ending.append(callback)


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
            return function(*args, **kwargs)
        finally:
            done.set()

    return call
