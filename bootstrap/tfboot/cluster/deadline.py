"""PyTorch's startup deadline (``DIST_STARTUP_TIMEOUT``): the group forms in time, or the task ends.

PyTorch has one ``timeout`` for the rendezvous and every collective after it, so tfboot
leaves it alone and bounds the start only: ``init_process_group`` must return within the
seconds left of ``DIST_STARTUP_TIMEOUT``, counted from ``import torch`` as TensorFlow's is.
When they run out, a thread names what the task waited for on stderr and ends it with exit
status 1. PyTorch's store waits with the interpreter lock released, so the thread runs; if
the lock is held all the same, ``faulthandler``'s watchdog (a C thread) ends the task
``EXIT_MARGIN_S`` later. Both are cancelled once ``init_process_group`` returns or raises.
"""

from __future__ import annotations

import faulthandler
import functools
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ..values import line
from .watcher import EXIT_MARGIN_S

EXIT_STATUS = 1  # as TensorFlow's task at DIST_STARTUP_TIMEOUT


def bounded(function: Callable[..., Any], deadline: float, text: str) -> Callable[..., Any]:
    """``function`` ending the process unless it returns by ``deadline`` (monotonic), after
    writing ``text`` as tfboot's error line."""

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        left = max(deadline - time.monotonic(), 0.0)
        done = threading.Event()

        def expire() -> None:
            if done.wait(left):
                return
            try:
                sys.stderr.write(line("error", text) + "\n")
                sys.stderr.flush()
            finally:
                os._exit(EXIT_STATUS)

        sink = open(os.devnull, "w")  # noqa: SIM115 - held open while the watchdog is armed
        faulthandler.dump_traceback_later(left + EXIT_MARGIN_S, exit=True, file=sink)
        threading.Thread(target=expire, name="tfboot-deadline", daemon=True).start()
        try:
            return function(*args, **kwargs)
        finally:
            done.set()
            faulthandler.cancel_dump_traceback_later()
            sink.close()

    return call
