"""The peer watcher child and the worker's watchdog, without TensorFlow (plain processes)."""

from __future__ import annotations

from support import run_python
from test_multiworker import free_ports
from tfboot.cluster.watcher import EXIT_MARGIN_S

TIMEOUT_S = 2

WATCH = """
import os, signal, sys, time
from tfboot.cluster.watcher import watch
child = watch(["localhost:{port}"], {timeout}, quiet=True)
time.sleep(1)  # the child is running, with its SIGINT ignored
print("own session:", os.getsid(child.pid) != os.getsid(0), flush=True)
os.kill(child.pid, signal.{signal})
time.sleep({wait})
print("survived", child.poll(), flush=True)
"""


def watch(signal: str, wait: float) -> tuple[int, str, list[str]]:
    (absent,) = free_ports(1)
    code = WATCH.format(port=absent, timeout=TIMEOUT_S, signal=signal, wait=wait)
    result = run_python(code, timeout=60)
    lines = [x for x in result.stderr.splitlines() if x.startswith("tfboot:")]
    return result.returncode, result.stdout, lines


def test_a_killed_watcher_cancels_the_watchdog() -> None:
    code, out, lines = watch("SIGKILL", TIMEOUT_S + EXIT_MARGIN_S + 2)
    assert code == 0 and "survived -9" in out, (out, lines)
    assert lines == [
        "tfboot: warning: cluster: peer watcher ended (status -9); peers no longer watched"
    ]


def test_the_watcher_ignores_ctrl_c_in_its_own_session() -> None:
    code, out, lines = watch("SIGINT", TIMEOUT_S + EXIT_MARGIN_S + 2)
    assert "own session: True" in out
    assert code == 1 and "survived" not in out, (out, lines)  # the timeout still ends it
    assert "DIST_STARTUP_TIMEOUT=2 reached, ending this worker (exit status 1)" in lines[-1]


LATE = """
import socket, sys, time
from tfboot.cluster.watcher import watch
start = time.monotonic()
watch(["localhost:{port}"], {timeout}, quiet=True)
time.sleep(1.5)
server = socket.create_server(("localhost", {port}))  # the peer answers before the deadline
# TensorFlow waits for its peers in C++ holding the interpreter lock; a busy loop with a long
# switch interval stands in for it: the thread that cancels the watchdog waits for the lock.
sys.setswitchinterval(30)
while time.monotonic() < start + {busy}:
    pass
sys.setswitchinterval(0.005)
time.sleep({timeout} + {margin} + 1 - (time.monotonic() - start))
print("survived", flush=True)
"""


def test_a_peer_answering_just_before_the_deadline_leaves_the_margin_to_reconnect() -> None:
    """The last peer answers at about 2 s of 3; the lock is held until 5.5 s, past a 1 s margin."""
    (port,) = free_ports(1)
    code = LATE.format(port=port, timeout=3, busy=5.5, margin=EXIT_MARGIN_S)
    result = run_python(code, timeout=60)
    assert result.returncode == 0 and "survived" in result.stdout, result.stderr[-2000:]
