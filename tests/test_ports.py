"""The tests' ports (``support.free_ports``): each is held from its check until the test
ends, so that no other process (another suite on this machine) takes it between the check
and the bind of the server the test starts there, and that server still binds: TensorFlow's
gRPC server, as a MultiWorkerMirroredStrategy worker starts it, and Python's."""

from __future__ import annotations

import errno
import socket
import subprocess
import sys

import pytest
import support
from support import free_ports, release_ports, run_python, scenario_env

CHECK = """
import socket
sock = socket.socket()
try:
    sock.bind(("127.0.0.1", {port}))
    print("bound")
except OSError as exc:
    print(exc.errno)
"""


def checked_elsewhere(port: int) -> str:
    """What another process's check of ``port`` gets (a bind without ``SO_REUSEADDR``,
    as free_ports's own and the suite's before it): "bound", or the errno."""
    return run_python(CHECK.format(port=port)).stdout.strip()


def test_a_held_port_is_refused_to_another_check_and_bound_by_a_server() -> None:
    (port,) = free_ports(1)
    assert checked_elsewhere(port) == str(errno.EADDRINUSE)
    with pytest.raises(ConnectionRefusedError):  # nothing listens yet
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    with socket.create_server(("localhost", port)):  # SO_REUSEADDR, as servers set it
        socket.create_connection(("localhost", port), timeout=5).close()
        assert checked_elsewhere(port) == str(errno.EADDRINUSE)
    release_ports()
    assert checked_elsewhere(port) == "bound"  # let go at the test's end


def test_a_held_port_is_never_given_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    held = free_ports(2)
    # the draws (a fake) first give two blocks that overlap the held ones, then draw again
    first, draw = iter([held[0] - 1, held[1]]), support.random.randrange
    monkeypatch.setattr(support.random, "randrange", lambda *a: next(first, None) or draw(*a))
    given = free_ports(2)
    assert next(first, None) is None and not set(given) & set(held), (held, given)


@pytest.mark.tf
@pytest.mark.slow
def test_tensorflow_s_grpc_server_binds_a_held_port() -> None:
    (port,) = free_ports(1)
    code = (
        "import sys\nimport tensorflow as tf\n"
        f"cluster = tf.train.ClusterSpec({{'worker': ['localhost:{port}']}})\n"
        "server = tf.distribute.Server(cluster, job_name='worker', task_index=0)\n"
        "print(server.target, flush=True)\nsys.stdin.readline()\n"
    )
    worker = subprocess.Popen([sys.executable, "-c", code], env=scenario_env(), text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)  # fmt: skip
    try:
        target = worker.stdout.readline().strip()
        assert target == f"grpc://localhost:{port}", worker.stderr.read()[-3000:]
        socket.create_connection(("localhost", port), timeout=5).close()
        assert checked_elsewhere(port) == str(errno.EADDRINUSE)
    finally:
        worker.communicate("\n", timeout=60)
