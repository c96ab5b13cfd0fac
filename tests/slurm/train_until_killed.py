"""All-reduce step after step under MultiWorkerMirroredStrategy; one rank is then lost.

The rank ``KILL_RANK`` kills itself with SIGKILL after step ``KILL_STEP`` (a node lost, an
OOM kill); the others block in the next all-reduce, inside TensorFlow, until the step ends.
Configured only by what tfboot put in ``TF_CONFIG`` at ``import tensorflow``.
"""

import os
import signal
import time

import tensorflow as tf

KILL_RANK = int(os.environ["KILL_RANK"])
KILL_STEP = int(os.environ.get("KILL_STEP", "3"))

strategy = tf.distribute.MultiWorkerMirroredStrategy()
rank = int(os.environ["SLURM_PROCID"])


@tf.function
def step() -> tf.Tensor:
    def reduce() -> tf.Tensor:
        return tf.distribute.get_replica_context().all_reduce("sum", tf.constant(1.0))

    return strategy.run(reduce)


for number in range(10000):
    total = float(step())
    print(f"rank {rank} step {number} sum {total:g} at {time.time():.3f}", flush=True)
    if rank == KILL_RANK and number == KILL_STEP:
        print(f"rank {rank} lost at {time.time():.3f}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.2)
