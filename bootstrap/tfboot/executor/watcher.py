"""The peer watcher: says which peers this task still waits for, and ends a task stuck on them.

TensorFlow holds the interpreter lock while MultiWorkerMirroredStrategy waits for its
peers in C++, so no Python thread of the worker can run then. The watcher is therefore a
small child process (this file run as a script, standard library only), started at
``import tensorflow`` and told by the worker, on its stdin, when a wait for the group
starts and ends (``Watcher.waiting``, ``Watcher.waited``: the executor brackets the call in
which TensorFlow waits, the strategy's ``_initialize_multi_worker`` or
``connect_to_cluster``). During a wait it resolves and TCP-connects each peer (not the
task itself), logs at most every ``INTERVAL_S`` which peers do not answer and why (DNS,
refused, timed out) on the worker's stderr, and stops once all have answered. Work before
the wait (loading data, building the model) and after it (training) is never counted.

DNS may block for many seconds (a resolver that never answers: glibc's default is 5 s per
try, twice), and ``getaddrinfo`` takes no timeout. Each peer is therefore probed in a
short-lived daemon thread of its own, at most one at a time per peer, while the main loop
keeps the clock: the first wait line comes within ``FIRST_LINE_S``, a resolution still
running after ``RESOLVE_S`` is reported as "DNS: no answer yet", and the startup timeout is
checked on time, whatever DNS does. The clock starts when the worker's wait starts
(``CLOCK_MONOTONIC`` is shared by all processes; the worker sends its own reading).

With ``DIST_STARTUP_TIMEOUT=S`` the child prints one line naming the peers still missing
S seconds after the wait started, and the worker ends with exit status 1 through
``deadline.exit_later``, armed as the wait starts (a timer whose end runs in a C thread
that needs no interpreter lock, and also works when the worker is PID 1, which other
processes cannot kill; the program's ``faulthandler`` watchdog stays its own); TensorFlow
swallows SIGTERM under the strategy anyway. The worker cancels that timer as soon as the
call returns or raises (it has the interpreter lock again then), and a thread of the
worker cancels it if the child itself was killed (with a warning that peers are no longer
watched). The child runs in a session of its own and ignores SIGINT, so a terminal's
Ctrl-C does not end it behind the worker's back.

The child stays until the worker ends. When it gets SIGTERM (``srun --kill-on-bad-exit``
and ``scancel`` signal every process of the step, and TensorFlow ignores the signal while
it waits on its peers), it names the peers that no longer answer (the lost task among
them), and kills the worker with SIGKILL if it is still running ``DIST_TERM_GRACE``
seconds later, so the step ends in seconds instead of Slurm's ``KillWait``.

Every peer may answer while TensorFlow still cannot form the group (a sidecar proxy
answers for an absent peer): the child then names that cause at the deadline. The timer
fires ``EXIT_MARGIN_S`` after the timeout, so the child's line comes first and a group
whose last peer answers just before the deadline is not ended while TensorFlow
reconnects. The window left: a group still not formed ``EXIT_MARGIN_S`` after the
deadline is ended all the same.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

INTERVAL_S = 30.0  # at most one wait line per interval
FIRST_LINE_S = 2.0  # the first wait line comes this long after start at the latest
RESOLVE_S = 2.0  # a retried resolution running longer is reported as "DNS: no answer yet"
PROBE_S = 1.0  # pause between the end of one peer's probe and the next
CONNECT_TIMEOUT_S = 2.0
EXIT_MARGIN_S = 5.0  # the worker ends this long after the timeout (the child's last line)
ANSWERED, TIMED_OUT = 0, 3  # the child's exit statuses
NO_ANSWER = "no answer yet"
END_OF_PEERS = "."  # the line after the peers on the child's stdin
WAIT, DONE = "wait", "done"  # the worker's words on it: "wait <its monotonic clock>", "done"
_keep: list[object] = []  # the watchers, kept as long as the worker runs
_terminated = threading.Event()  # the child got SIGTERM


def _emit(kind: str, text: str) -> None:
    # tfboot.values.line's format: this file also runs as a script, on the standard library.
    print(f"tfboot:{'' if kind == 'info' else f' {kind}:'} {text}", file=sys.stderr, flush=True)


def connect(infos: list[tuple[Any, ...]]) -> str | None:
    """None when one of ``getaddrinfo``'s ``infos`` accepts a TCP connection, else why not.

    "refused" wins over the other addresses' errors: the host is there, nothing listens yet.
    """
    reasons = []
    for family, kind, proto, _, target in infos:
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.settimeout(CONNECT_TIMEOUT_S)
                sock.connect(target)
                return None
        except ConnectionRefusedError:
            reasons.append("refused")
        except TimeoutError:
            reasons.append("timed out")
        except OSError as exc:
            reasons.append(exc.strerror or str(exc))
    return "refused" if "refused" in reasons else next(iter(reasons), "no address")


class PeerProbe:
    """One peer, probed again and again (resolve, then connect) in a daemon thread.

    The main loop reads what the probe's thread writes without a lock: a finished probe's
    answer and its end are one tuple, written in one assignment (``last``), and each look
    of the main loop reads it once and judges the peer by that reading alone, so no line
    lists a peer that answered as one that still waits."""

    def __init__(self, address: str, wake: threading.Event) -> None:
        self.address, self._wake = address, wake
        # The last finished probe: its answer (None: accepted) and when it ended.
        self.last: tuple[str | None, float] | None = None
        self.stage = ""  # "resolving" or "connecting" while a probe runs
        self.began = float("-inf")  # when the running probe, or the last one, started

    def start(self, now: float) -> None:
        self.began, self.stage = now, "resolving"
        threading.Thread(target=self._run, name=f"probe {self.address}", daemon=True).start()

    def due(self, now: float, last: tuple[str | None, float] | None) -> bool:
        """No probe runs, none accepted (as of ``last``), and the last ended ``PROBE_S`` ago."""
        if self.stage or accepted(last):
            return False
        return last is None or now - last[1] >= PROBE_S

    def reason(self, now: float, last: tuple[str | None, float] | None) -> str:
        """Why the peer does not answer, as of ``last`` (a reading of ``self.last``)."""
        if self.stage == "resolving" and (last is None or now - self.began >= RESOLVE_S):
            return f"DNS: {NO_ANSWER}"
        return (last[0] if last is not None else None) or NO_ANSWER

    def _run(self) -> None:
        self.last = (self._probe(), time.monotonic())  # one assignment: read whole
        self.stage = ""
        self._wake.set()

    def _probe(self) -> str | None:
        host, _, port = self.address.rpartition(":")
        try:
            infos = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
            return f"DNS: {getattr(exc, 'strerror', None) or exc}"
        self.stage = "connecting"
        return connect(infos)


def accepted(last: tuple[str | None, float] | None) -> bool:
    """Whether a reading of a probe's ``last`` says the peer accepted a connection."""
    return last is not None and last[0] is None


def wait_line(pending: dict[str, str], elapsed: float) -> str:
    listed = ", ".join(f"{peer} ({why})" for peer, why in pending.items())
    return f"cluster: after {elapsed:.0f} s still waiting for {len(pending)} peer(s): {listed}"


class Orders:
    """The worker's words on the child's stdin, read by a daemon thread: when a wait started
    (its clock), and that it is over. The end of the stream is the worker gone."""

    def __init__(self, stream: Any, wake: threading.Event) -> None:
        self._stream, self._wake = stream, wake
        self.started: float | None = None  # the worker's clock at the wait's start, not taken
        self.done = threading.Event()  # the wait in progress is over
        threading.Thread(target=self._read, name="orders", daemon=True).start()

    def _read(self) -> None:
        for order in self._stream:
            word, _, value = order.strip().partition(" ")
            if word == WAIT:
                self.done.clear()
                self.started = float(value)
            elif word == DONE:
                self.done.set()
            self._wake.set()

    def take(self) -> float | None:
        started, self.started = self.started, None
        return started


def run(
    parent: int,
    peers: dict[str, str],
    timeout: float | None,
    quiet: bool,
    grace: float,
    orders: Any = (),
) -> int:
    """The child's loop; returns ANSWERED (also when the worker is gone) or TIMED_OUT.

    ``peers``: address -> the task it is ("worker 2"), for the lines; ``orders``: the lines
    the worker sends (``Orders``). Between waits the child stays beside the worker, ready for
    a SIGTERM; each wait is a round of probes (``_round``).
    """
    wake = threading.Event()
    _signal_wakes(wake)
    told = Orders(orders, wake)
    while os.getppid() == parent:
        if _terminated.is_set():
            return _end(parent, peers, grace, quiet)
        started = told.take()
        if started is not None:
            if _round(parent, started, peers, timeout, quiet, wake, told) == TIMED_OUT:
                return TIMED_OUT
            continue
        wake.wait(PROBE_S)
        wake.clear()
    return ANSWERED


def _round(
    parent: int,
    started: float,
    peers: dict[str, str],
    timeout: float | None,
    quiet: bool,
    wake: threading.Event,
    told: Orders,
) -> int:
    """One wait, from the worker's clock ``started``: probe until every peer answered and the
    worker said the wait is over (ANSWERED), or the timeout (TIMED_OUT, its line said)."""
    probes = [PeerProbe(peer, wake) for peer in peers]
    deadline = float("inf") if timeout is None else started + timeout
    next_line = float("inf") if quiet else started + FIRST_LINE_S  # the next wait line's time
    printed = False
    while os.getppid() == parent and not told.done.is_set():
        wake.clear()  # before looking: a probe ending from here on ends the wait below at once
        if _terminated.is_set():
            return ANSWERED  # the main loop names the lost peers
        now = time.monotonic()
        seen = {p: p.last for p in probes}  # one reading of each: every judgement below
        probes = [p for p in probes if not accepted(seen[p])]
        if not probes:
            if printed:
                done = f"cluster: all {len(peers)} peer(s) answered after {now - started:.0f} s"
                _emit("info", done)
            return _answered(parent, started, len(peers), timeout, told)
        for p in probes:
            if p.due(now, seen[p]):
                p.start(now)
        pending = {p.address: p.reason(now, seen[p]) for p in probes}
        if now >= deadline:
            reached = f"; DIST_STARTUP_TIMEOUT={timeout:g} reached, ending this worker"
            _emit("error", wait_line(pending, now - started) + reached + " (exit status 1)")
            return TIMED_OUT
        tried = all(seen[p] is not None for p in probes)  # every peer probed once at least
        if now >= next_line or (not printed and not quiet and tried):
            _emit("info", wait_line(pending, now - started))
            printed, next_line = True, now + INTERVAL_S
        wake.wait(max(0.0, min(PROBE_S, deadline - now, next_line - now)))
    return ANSWERED


def _answered(parent: int, started: float, count: int, timeout: float | None,
              told: Orders) -> int:  # fmt: skip
    """Every peer answered; with a timeout, name the cause if the wait still runs out."""
    if timeout is None:
        return ANSWERED
    while os.getppid() == parent and time.monotonic() < started + timeout:
        if told.done.is_set() or _terminated.is_set():
            return ANSWERED
        told.done.wait(min(PROBE_S, max(0.0, started + timeout - time.monotonic())))
    if os.getppid() != parent or told.done.is_set():
        return ANSWERED
    _emit(
        "error",
        f"cluster: all {count} peer(s) accept TCP connections, but TensorFlow has not formed "
        f"the group after {timeout:g} s: something answers for the peers without being them "
        "(a sidecar proxy such as Istio's: exclude the cluster port from it) or a peer is not "
        f"a TensorFlow server; DIST_STARTUP_TIMEOUT={timeout:g} reached, ending this worker "
        "(exit status 1)",
    )
    return TIMED_OUT


def _signal_wakes(wake: threading.Event) -> None:
    """SIGTERM sets its event and wakes the loop (the child's main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers (the child's loop runs there)

    def handler(_signum: int, _frame: Any) -> None:
        _terminated.set()
        wake.set()

    signal.signal(signal.SIGTERM, handler)


def _lost(peers: dict[str, str]) -> dict[str, str]:
    """The peers that do not accept a connection now, probed at once, with why not."""
    wake = threading.Event()
    probes = [PeerProbe(peer, wake) for peer in peers]
    now = time.monotonic()
    for probe in probes:
        probe.start(now)
    deadline = now + CONNECT_TIMEOUT_S + 1
    while time.monotonic() < deadline and any(p.stage for p in probes):
        wake.wait(0.1)
        wake.clear()
    seen = {p: p.last for p in probes}
    return {p.address: p.reason(time.monotonic(), seen[p]) for p in probes
            if not accepted(seen[p])}  # fmt: skip


def _end(parent: int, peers: dict[str, str], grace: float, quiet: bool) -> int:
    """SIGTERM: name the peers that no longer answer; kill the worker if it outlives ``grace``."""
    lost = _lost(peers)
    listed = ", ".join(f"{peers[a] or a} at {a} ({why})" for a, why in lost.items())
    if not quiet:
        gone = f"; peers no longer answering: {listed}" if lost else "; every peer still answers"
        _emit("warning", f"cluster: SIGTERM: this task is being ended{gone}")
    end = time.monotonic() + grace
    while os.getppid() == parent and time.monotonic() < end:
        time.sleep(0.1)
    if os.getppid() != parent:
        return ANSWERED
    _emit(
        "error",
        f"cluster: this task still runs {grace:g} s after SIGTERM (TensorFlow ignores it while "
        "it waits on its peers): killing it (SIGKILL; DIST_TERM_GRACE sets the wait)",
    )
    with contextlib.suppress(OSError):  # it ended meanwhile
        os.kill(parent, signal.SIGKILL)
    return ANSWERED


class Watcher:
    """The worker's side: the child, and the end armed while a wait runs."""

    def __init__(self, child: subprocess.Popen[bytes], timeout: float | None,
                 quiet: bool) -> None:  # fmt: skip
        self.child, self.timeout, self.quiet = child, timeout, quiet
        self.cancel: Callable[[], object] | None = None

    def _tell(self, order: str) -> bool:
        stdin = self.child.stdin
        try:
            assert stdin is not None
            stdin.write(order.encode() + b"\n")
            stdin.flush()
        except (OSError, ValueError, AssertionError):  # the child is gone: already said
            return False
        return True

    def waiting(self) -> None:
        """A wait for the group starts: the child's clock, and with a timeout, the end."""
        if self._tell(f"{WAIT} {time.monotonic()!r}") and self.timeout is not None:
            from .deadline import EXIT_STATUS, exit_later, waiting

            waiting(self.timeout)
            self.stand_down()
            self.cancel = exit_later(self.timeout + EXIT_MARGIN_S, EXIT_STATUS)

    def waited(self) -> None:
        """The wait is over (the call returned or raised): nothing may end the worker."""
        if self.stand_down():
            from .deadline import waiting

            waiting(None)
        self._tell(DONE)

    def stand_down(self) -> bool:
        cancel, self.cancel = self.cancel, None
        if cancel is not None:
            cancel()
        return cancel is not None

    def follow(self) -> None:
        """Once the child ends without reaching the timeout, nothing may end the worker."""
        status = self.child.wait()
        if status == TIMED_OUT:
            return
        self.stand_down()
        if status != ANSWERED and not self.quiet:
            ended = f"cluster: peer watcher ended (status {status}); peers no longer watched"
            _emit("warning", ended)


def watch(
    peers: list[str],
    timeout: float | None,
    quiet: bool,
    names: dict[str, str] | None = None,
    grace: float | None = None,
) -> Watcher | None:
    """Start the watcher child for ``peers``; a wait with ``timeout`` ends the worker at its
    deadline (``Watcher.waiting``). Never blocks.

    ``names``: address -> the task it is, for the lines; ``grace``: how long the worker may
    outlive a SIGTERM (None: ``DIST_TERM_GRACE``'s default). None when it could not start.
    A descendant of the task (a subprocess, a multiprocessing worker importing TensorFlow)
    is no task (``engines.task_of``) and starts none. The peers go to the child on its
    stdin, so their number never meets the argument limits; the stdin stays open for the
    worker's words.
    """
    if grace is None:  # imported here: run as a script, this file imports nothing of tfboot
        from ..cluster.variables import TERM_GRACE_S

        grace = TERM_GRACE_S
    args = [sys.executable, "-I", "-S", os.path.abspath(__file__), str(os.getpid())]
    args += [str(timeout or 0), "quiet" if quiet else "info", str(grace)]
    try:
        child = subprocess.Popen(  # its own session: a terminal's Ctrl-C reaches only the worker
            args, stdin=subprocess.PIPE, start_new_session=True
        )
        assert child.stdin is not None
        named = names or {}
        listed = [f"{p} {named.get(p, '')}".strip() for p in peers] + [END_OF_PEERS]
        child.stdin.write("".join(f"{x}\n" for x in listed).encode())
        child.stdin.flush()
    except OSError as exc:  # no interpreter to run (an embedded Python): say so, go on
        if not quiet:
            _emit(
                "warning", f"cluster: the peer watcher could not start ({exc}); peers not watched"
            )
        return None
    watcher = Watcher(child, timeout, quiet)
    _keep.append(watcher)
    threading.Thread(target=watcher.follow, name="tfboot-peers", daemon=True).start()
    return watcher


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only the worker decides on an interrupt
    _parent, _timeout, _level, _grace = sys.argv[1:]
    _peers: dict[str, str] = {}
    for _line in sys.stdin:
        if _line.strip() == END_OF_PEERS:
            break
        _address, _, _name = _line.strip().partition(" ")
        _peers[_address] = _name
    _code = run(int(_parent), _peers, float(_timeout) or None, _level == "quiet",
                float(_grace), sys.stdin)  # fmt: skip
    sys.exit(_code)
