"""The peer watcher child and the worker's watchdog, without TensorFlow (plain processes)."""

from __future__ import annotations

import os

import pytest
from support import free_ports, run_python
from tfboot.executor.watcher import EXIT_MARGIN_S

pytestmark = pytest.mark.slow  # each waits out a startup timeout and its margin (7 to 10 s)

TIMEOUT_S = 2

WATCH = """
import os, signal, sys, time
from tfboot.executor.watcher import watch
watcher = watch(["localhost:{port}"], {timeout}, quiet={quiet})
watcher.waiting()  # the wait for the group starts: the clock and the end
child = watcher.child
time.sleep(1)  # the child is running, with its SIGINT ignored
print("own session:", os.getsid(child.pid) != os.getsid(0), flush=True)
os.kill(child.pid, signal.{signal})
time.sleep({wait})
print("survived", child.poll(), flush=True)
"""


def watch(signal: str, wait: float, quiet: bool = True) -> tuple[int, str, list[str]]:
    (absent,) = free_ports(1)
    code = WATCH.format(port=absent, timeout=TIMEOUT_S, signal=signal, wait=wait, quiet=quiet)
    result = run_python(code, timeout=60)
    lines = [x for x in result.stderr.splitlines() if x.startswith("tfboot:")]
    return result.returncode, result.stdout, lines


def test_a_killed_watcher_cancels_the_watchdog() -> None:
    code, out, lines = watch("SIGKILL", TIMEOUT_S + EXIT_MARGIN_S + 2, quiet=False)
    assert code == 0 and "survived -9" in out, (out, lines)
    assert lines[-1] == (
        "tfboot: warning: cluster: peer watcher ended (status -9); peers no longer watched"
    )


def test_quiet_silences_the_watchers_warnings() -> None:
    code, out, lines = watch("SIGKILL", TIMEOUT_S + EXIT_MARGIN_S + 2)
    assert code == 0 and "survived -9" in out, (out, lines)
    assert lines == []


def test_the_watcher_ignores_ctrl_c_in_its_own_session() -> None:
    code, out, lines = watch("SIGINT", TIMEOUT_S + EXIT_MARGIN_S + 2)
    assert "own session: True" in out
    assert code == 1 and "survived" not in out, (out, lines)  # the timeout still ends it
    assert "DIST_STARTUP_TIMEOUT=2 reached, ending this worker (exit status 1)" in lines[-1]


LATE = """
import socket, sys, time
from tfboot.executor.watcher import watch
start = time.monotonic()
watcher = watch(["localhost:{port}"], {timeout}, quiet=True)
watcher.waiting()
time.sleep(1.5)
server = socket.create_server(("localhost", {port}))  # the peer answers before the deadline
# TensorFlow waits for its peers in C++ holding the interpreter lock; a busy loop with a long
# switch interval stands in for it: the thread that cancels the watchdog waits for the lock.
sys.setswitchinterval(30)
while time.monotonic() < start + {busy}:
    pass
sys.setswitchinterval(0.005)
watcher.waited()  # the group formed: the call that waited returns
time.sleep({timeout} + {margin} + 1 - (time.monotonic() - start))
print("survived", flush=True)
"""


def test_a_peer_answering_just_before_the_deadline_leaves_the_margin_to_reconnect() -> None:
    """The last peer answers at about 2 s of 3; the lock is held until 5.5 s, past a 1 s margin."""
    (port,) = free_ports(1)
    code = LATE.format(port=port, timeout=3, busy=5.5, margin=EXIT_MARGIN_S)
    result = run_python(code, timeout=60)
    assert result.returncode == 0 and "survived" in result.stdout, result.stderr[-2000:]


def test_peers_that_answer_but_never_form_the_group_end_the_worker_with_its_line() -> None:
    """A listener that accepts and says nothing (a sidecar proxy) answers for the peer; the
    lock stays held past the deadline, as TensorFlow's wait for the group holds it."""
    (port,) = free_ports(1)
    code = PROXY.format(port=port, timeout=TIMEOUT_S, busy=TIMEOUT_S + EXIT_MARGIN_S + 5)
    result = run_python(code, timeout=60)
    lines = [x for x in result.stderr.splitlines() if x.startswith("tfboot:")]
    assert result.returncode == 1 and "survived" not in result.stdout, result.stderr[-2000:]
    assert "accept TCP connections, but TensorFlow has not formed the group" in lines[-1], lines
    assert "DIST_STARTUP_TIMEOUT=2 reached, ending this worker (exit status 1)" in lines[-1]


PROXY = """
import socket, sys, time
from tfboot.executor.watcher import watch
server = socket.create_server(("localhost", {port}))  # accepts, says nothing
start = time.monotonic()
watch(["localhost:{port}"], {timeout}, quiet=True).waiting()
sys.setswitchinterval(30)
while time.monotonic() < start + {busy}:
    pass
print("survived", flush=True)
"""


def test_many_peers_reach_the_watcher_whatever_their_number() -> None:
    """3000 peers (more than one argument string may hold) go to the child on its stdin."""
    code = """
import time
from tfboot.executor.watcher import watch
peers = [f"worker-{i}.a-long-subdomain-name.namespace.svc.cluster.local:2222" for i in range(3000)]
child = watch(peers, None, quiet=True).child
time.sleep(2)
print("watching", child.poll() is None, flush=True)
child.kill()
"""
    result = run_python(code, timeout=60)
    assert "watching True" in result.stdout, result.stderr[-2000:]


TERM = """
import os, signal, socket, sys, time
from tfboot.executor.watcher import watch
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as TensorFlow, waiting on its peers
server = socket.create_server(("localhost", {port}))
watcher = watch(["localhost:{port}"], None, quiet=False, names={{"localhost:{port}": "worker 2"}},
                grace={grace})
watcher.waiting()
child = watcher.child
time.sleep(2)  # the peer answered: the watcher stays beside the worker
server.close()  # the peer is lost
print(child.pid, flush=True)
sys.setswitchinterval(30)  # the interpreter lock held, as in TensorFlow's C++
while True:
    pass
"""


def test_sigterm_ends_a_worker_that_ignores_it_and_names_the_lost_peer() -> None:
    """Slurm signals every process of the step: the worker ignores SIGTERM, the watcher acts."""
    import signal
    import subprocess
    import sys
    import time

    from support import scenario_env

    (port,) = free_ports(1)
    worker = subprocess.Popen(
        [sys.executable, "-c", TERM.format(port=port, grace=2)],
        env=scenario_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert worker.stdout is not None
    watcher = int(worker.stdout.readline())
    time.sleep(0.5)
    start = time.monotonic()
    for pid in (worker.pid, watcher):  # what srun --kill-on-bad-exit does to the step
        os.kill(pid, signal.SIGTERM)
    worker.wait(timeout=30)
    took = time.monotonic() - start
    lines = [x for x in worker.stderr.read().splitlines() if x.startswith("tfboot:")]
    # killed by the watcher once the grace ran out, counted from the SIGTERM
    assert worker.returncode == -signal.SIGKILL and took >= 2, (took, lines)
    assert lines[-2] == (
        f"tfboot: warning: cluster: SIGTERM: this task is being ended; peers no longer "
        f"answering: worker 2 at localhost:{port} (refused)"
    ), lines
    assert "still runs 2 s after SIGTERM" in lines[-1] and "killing it (SIGKILL" in lines[-1]


def test_a_peer_that_answered_is_never_listed_as_waiting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The race an outside probe found: a probe's thread wrote its answer in several steps,
    and the main loop, reading between them, listed a peer that had just answered as "no
    answer yet" (31 to 222 rounds of 300). Driven here against a listener on loopback: a
    round whose every peer answers prints no wait line at all."""
    import socket
    import threading
    import time

    from tfboot.executor import watcher

    listener = socket.create_server(("127.0.0.1", 0))
    listener.listen(512)
    port = listener.getsockname()[1]

    def accept() -> None:
        while True:
            conn, _ = listener.accept()
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    told = watcher.Orders((), threading.Event())
    for _ in range(300):
        wake = threading.Event()
        started = time.monotonic()
        code = watcher._round(os.getppid(), started, {f"127.0.0.1:{port}": ""}, None, False,
                              wake, told)  # fmt: skip
        assert code == watcher.ANSWERED
    lines = capsys.readouterr().err.splitlines()
    assert not [x for x in lines if "still waiting" in x], lines[:5]
