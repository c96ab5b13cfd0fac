"""The peer watcher: a daemon thread that says which peers this task still waits for.

It resolves and TCP-connects each peer (not itself), logs at most every ``INTERVAL_S``
which peers do not answer and why (DNS, refused, timeout), and stops once all have
answered. With ``DIST_STARTUP_TIMEOUT``, a task whose peers are still unreachable after
that many seconds prints one line naming them and ends the process with ``EXIT_STATUS``,
so the engine restarts the group. ``os._exit`` is used because TensorFlow swallows SIGTERM
under MultiWorkerMirroredStrategy and its main thread may be waiting in C++.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable

from ..report import emit

INTERVAL_S = 30.0  # at most one wait line per interval
PROBE_S = 1.0  # pause between rounds of probes
CONNECT_TIMEOUT_S = 2.0
EXIT_STATUS = 75  # EX_TEMPFAIL: the peers were unreachable, retrying the group may help


def probe(address: str) -> str | None:
    """None when ``address`` accepts a TCP connection, else why not, in a few words."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        return f"DNS: {getattr(exc, 'strerror', None) or exc}"
    last = "no address"
    for family, kind, proto, _, target in infos:
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.settimeout(CONNECT_TIMEOUT_S)
                sock.connect(target)
                return None
        except ConnectionRefusedError:
            last = "refused"
        except socket.timeout:
            last = "timed out"
        except OSError as exc:
            last = exc.strerror or str(exc)
    return last


def wait_line(pending: dict[str, str], elapsed: float) -> str:
    listed = ", ".join(f"{peer} ({why})" for peer, why in pending.items())
    return f"cluster: after {elapsed:.0f} s still waiting for {len(pending)} peer(s): {listed}"


def _watch(
    peers: list[str], timeout: float | None, log: Callable[[str, str], None], started: float
) -> None:
    pending = dict.fromkeys(peers, "not tried")
    last_line = None
    while pending:
        for peer in list(pending):
            why = probe(peer)
            if why is None:
                del pending[peer]
            else:
                pending[peer] = why
        elapsed = time.monotonic() - started
        if not pending:
            if last_line is not None:
                log("info", f"cluster: all {len(peers)} peer(s) answered after {elapsed:.0f} s")
            return
        if timeout is not None and elapsed >= timeout:
            emit("error", wait_line(pending, elapsed) + f"; DIST_STARTUP_TIMEOUT={timeout:g} "
                 f"reached, exiting with status {EXIT_STATUS}")  # fmt: skip
            os._exit(EXIT_STATUS)
        if last_line is None or elapsed - last_line >= INTERVAL_S:
            log("info", wait_line(pending, elapsed))
            last_line = elapsed
        time.sleep(PROBE_S)


def watch(peers: list[str], timeout: float | None, quiet: bool) -> threading.Thread:
    """Start the daemon thread watching ``peers``; it never blocks the caller."""

    def log(kind: str, text: str) -> None:
        if not quiet:
            emit(kind, text)

    thread = threading.Thread(
        target=_watch,
        args=(list(peers), timeout, log, time.monotonic()),
        name="tfboot-peer-watcher",
        daemon=True,
    )
    thread.start()
    return thread
