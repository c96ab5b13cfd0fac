"""All-reduce step after step under MultiWorkerMirroredStrategy; one rank is then lost.

The rank ``KILL_RANK`` kills itself with SIGKILL (``KILL_HOW=exit``: exits with status 1)
after step ``KILL_STEP`` (a node lost, an OOM kill, an error); the others block in the
next all-reduce, inside TensorFlow, until the step ends. With ``KILL_STEP=-1`` it is lost
before building the strategy, once the others' servers listen: they wait in TensorFlow's
C++ for the group to form. Configured only by what tfboot put in ``TF_CONFIG`` at
``import tensorflow``.
"""

import json
import os
import signal
import socket
import time

import tensorflow as tf

KILL_RANK = int(os.environ["KILL_RANK"])
KILL_STEP = int(os.environ.get("KILL_STEP", "3"))
# "kill": SIGKILL (a node lost, an OOM kill); "exit": exit status 1 (an error in the task).
KILL_HOW = os.environ.get("KILL_HOW", "kill")

rank = int(os.environ["SLURM_PROCID"])


def lose() -> None:
    print(f"rank {rank} lost at {time.time():.3f}", flush=True)
    if KILL_HOW == "exit":
        os._exit(1)
    os.kill(os.getpid(), signal.SIGKILL)


def others_listen() -> None:
    """Wait until every other task's server accepts connections: they are in the group's wait."""
    config = json.loads(os.environ["TF_CONFIG"])
    own = config["cluster"]["worker"][config["task"]["index"]]
    for address in config["cluster"]["worker"]:
        host, port = address.rsplit(":", 1)
        while address != own:
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)


if rank == KILL_RANK and KILL_STEP < 0:
    others_listen()
    time.sleep(1)
    lose()
strategy = tf.distribute.MultiWorkerMirroredStrategy()


@tf.function
def step() -> tf.Tensor:
    def reduce() -> tf.Tensor:
        return tf.distribute.get_replica_context().all_reduce("sum", tf.constant(1.0))

    return strategy.run(reduce)


for number in range(10000):
    total = float(step())
    print(f"rank {rank} step {number} sum {total:g} at {time.time():.3f}", flush=True)
    if rank == KILL_RANK and number == KILL_STEP:
        lose()
    time.sleep(0.2)
