"""The peer watcher: says which peers this task still waits for, and ends a task stuck on them.

TensorFlow holds the interpreter lock while MultiWorkerMirroredStrategy waits for its
peers in C++, so no Python thread of the worker can run then. The watcher is therefore a
small child process (this file run as a script, standard library only): it resolves and
TCP-connects each peer (not the task itself), logs at most every ``INTERVAL_S`` which
peers do not answer and why (DNS, refused, timed out) on the worker's stderr, and exits
once all have answered or the worker is gone.

With ``DIST_STARTUP_TIMEOUT=S`` the child prints one line naming the peers still missing
after S seconds, and the worker ends with exit status 1 through ``faulthandler``'s
watchdog (a C thread that needs no interpreter lock and also works when the worker is
PID 1, which other processes cannot kill); TensorFlow swallows SIGTERM under the strategy
anyway. A thread of the worker cancels that watchdog once the child reports every peer
answered.
"""

from __future__ import annotations

import faulthandler
import os
import socket
import subprocess
import sys
import threading
import time

INTERVAL_S = 30.0  # at most one wait line per interval
PROBE_S = 1.0  # pause between rounds of probes
CONNECT_TIMEOUT_S = 2.0
EXIT_MARGIN_S = 1.0  # the worker ends this long after the child's last line
ANSWERED, TIMED_OUT = 0, 3  # the child's exit statuses
_keep: list[object] = []  # faulthandler's file, open as long as the watchdog may fire


def _emit(kind: str, text: str) -> None:
    print(f"tfboot:{'' if kind == 'info' else f' {kind}:'} {text}", file=sys.stderr, flush=True)


def probe(address: str) -> str | None:
    """None when ``address`` accepts a TCP connection, else why not, in a few words."""
    host, _, port = address.rpartition(":")
    try:
        infos = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)
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


def run(parent: int, peers: list[str], timeout: float | None, quiet: bool) -> int:
    """The child's loop; returns ANSWERED (also when the worker is gone) or TIMED_OUT."""
    started, last_line = time.monotonic(), None
    pending = dict.fromkeys(peers, "not tried")
    while pending and os.getppid() == parent:
        for peer in list(pending):
            why = probe(peer)
            if why is None:
                del pending[peer]
            else:
                pending[peer] = why
        elapsed = time.monotonic() - started
        if not pending:
            if last_line is not None and not quiet:
                _emit("info", f"cluster: all {len(peers)} peer(s) answered after {elapsed:.0f} s")
            break
        if timeout is not None and elapsed >= timeout:
            _emit("error", wait_line(pending, elapsed) + f"; DIST_STARTUP_TIMEOUT={timeout:g} "
                  "reached, ending this worker (exit status 1)")  # fmt: skip
            return TIMED_OUT
        if not quiet and (last_line is None or elapsed - last_line >= INTERVAL_S):
            _emit("info", wait_line(pending, elapsed))
            last_line = elapsed
        time.sleep(PROBE_S)
    return ANSWERED


def _cancel_when_answered(child: subprocess.Popen[bytes], timeout: float | None) -> None:
    if child.wait() == ANSWERED and timeout is not None:
        faulthandler.cancel_dump_traceback_later()


def watch(peers: list[str], timeout: float | None, quiet: bool) -> subprocess.Popen[bytes] | None:
    """Start the watcher child for ``peers``; with ``timeout``, arm the exit. Never blocks."""
    args = [sys.executable, "-I", "-S", os.path.abspath(__file__), str(os.getpid())]
    args += [str(timeout or 0), "quiet" if quiet else "info", *peers]
    try:
        child = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    except OSError as exc:  # no interpreter to run (an embedded Python): say so, go on
        _emit("warning", f"cluster: the peer watcher could not start ({exc}); peers not watched")
        return None
    if timeout is not None:
        sink = open(os.devnull, "w")  # noqa: SIM115 - held open while the watchdog is armed
        _keep.append(sink)
        faulthandler.dump_traceback_later(timeout + EXIT_MARGIN_S, exit=True, file=sink)
    waiter = threading.Thread(
        target=_cancel_when_answered, args=(child, timeout), name="tfboot-peers", daemon=True
    )
    waiter.start()
    return child


if __name__ == "__main__":
    _parent, _timeout, _level, *_peers = sys.argv[1:]
    sys.exit(run(int(_parent), _peers, float(_timeout) or None, _level == "quiet"))
