"""Data-parallel SGD on fixed global batches with PyTorch or JAX; prints the weights as JSON.

``python dp_train.py torch|jax|keras single|multi``. ``multi`` joins the job as a training
script does with no launcher-specific code: ``torch.distributed.init_process_group("gloo")``,
``jax.distributed.initialize()`` or ``keras.distribution.initialize()``, each with no
arguments, configured only by what tfboot set at the framework's import. Each process
computes its share of the global batch's gradient and the shares are summed across
processes (gloo's all-reduce; JAX's ``process_allgather``). ``single`` trains one process on
the whole batches, as the reference: every rank of ``multi`` must end with its weights.

``PREPARE_S``: seconds of work (loading data) before the group forms. ``GROUPS`` (torch): a
group is formed, used and destroyed that many times, as a job with a second phase does (each
earlier one on a port of its own, the next ones up from ``MASTER_PORT``).

``DATA=tf`` (jax, keras): the batches come through ``tf.data``, imported once the group
formed, as a JAX or Keras job's data loader is.

torch prints ``joining at <time>`` (``time.time()``) as it calls the last
``init_process_group``: the moment its start-up deadline counts from.

``LOSE_RANK``/``LOSE_STEP``: that rank prints ``lost at <time>`` after that step and kills
itself (SIGKILL: a node lost, an OOM kill) while the others go on to the next all-reduce;
``STEPS`` and ``STEP_S`` make the run long enough for that.
"""

import json
import os
import signal
import sys
import time

import numpy as np

FRAMEWORK, MODE = sys.argv[1], sys.argv[2]
STEPS = int(os.environ.get("STEPS", "4"))
STEP_S = float(os.environ.get("STEP_S", "0"))
GLOBAL_BATCH = 12  # divisible by 1, 2, 3 and 4 processes
LEARNING_RATE = 0.1
LOSE_RANK = int(os.environ.get("LOSE_RANK", "-1"))
LOSE_STEP = int(os.environ.get("LOSE_STEP", "-1"))
PREPARE_S = float(os.environ.get("PREPARE_S", "0"))
GROUPS = int(os.environ.get("GROUPS", "1"))
DATA = os.environ.get("DATA", "")


def batches() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(STEPS, GLOBAL_BATCH, 4))
    return x, x @ np.array([1.0, 2.0, -1.0, 0.5]) + 0.3


def torch_job():
    import torch
    import torch.distributed as dist

    if MODE == "multi":
        time.sleep(PREPARE_S)
        port = os.environ["MASTER_PORT"]
        for phase in range(GROUPS - 1):  # an earlier phase: form, use and end a group
            # on a port of its own, as a program that forms groups one after another must: a
            # rank that re-joins on the port of a group its peer has not yet destroyed joins
            # that old store, which then closes under it (PyTorch's race, tfboot or not)
            os.environ["MASTER_PORT"] = str(int(port) + 1 + phase)
            dist.init_process_group("gloo")
            dist.all_reduce(torch.zeros(1))
            time.sleep(STEP_S)
            dist.destroy_process_group()
        os.environ["MASTER_PORT"] = port
        print(f"joining at {time.time():.3f}", flush=True)
        dist.init_process_group("gloo")

        def total(grad: np.ndarray) -> np.ndarray:
            tensor = torch.from_numpy(grad)
            dist.all_reduce(tensor)
            return tensor.numpy()

        # As PyTorch asks of every script: a process that exits with its gloo group alive
        # may abort at exit ("terminate called without an active exception", SIGABRT): 7
        # jobs of four ranks in 80 here, with or without tfboot; none in 100 that end it.
        return dist.get_rank(), dist.get_world_size(), total, dist.destroy_process_group
    return 0, 1, lambda grad: grad, lambda: None


def jax_job(initialize):
    import jax
    from jax.experimental import multihost_utils

    jax.config.update("jax_enable_x64", True)  # the same float64 sums as the reference
    if MODE == "multi":
        initialize()

        def total(grad: np.ndarray) -> np.ndarray:
            return np.asarray(multihost_utils.process_allgather(grad)).sum(axis=0)

        return jax.process_index(), jax.process_count(), total, lambda: None
    return 0, 1, lambda grad: grad, lambda: None


def job():
    if FRAMEWORK == "torch":
        return torch_job()
    if FRAMEWORK == "keras":
        os.environ.setdefault("KERAS_BACKEND", "jax")
        import keras

        return jax_job(keras.distribution.initialize)
    import jax

    return jax_job(jax.distributed.initialize)


def main() -> None:
    rank, world, total, end = job()
    x, y = batches()
    if DATA == "tf":
        import tensorflow as tf

        x = np.stack([row.numpy() for row in tf.data.Dataset.from_tensor_slices(x)])
    per = GLOBAL_BATCH // world
    w, b = np.zeros(4), 0.0
    for step in range(STEPS):
        xs, ys = x[step, rank * per : (rank + 1) * per], y[step, rank * per : (rank + 1) * per]
        error = xs @ w + b - ys
        share = np.concatenate([2 * xs.T @ error, [2 * error.sum()]]) / GLOBAL_BATCH
        grad = total(share)
        w, b = w - LEARNING_RATE * grad[:4], b - LEARNING_RATE * grad[4]
        if rank == LOSE_RANK and step == LOSE_STEP:
            print(f"rank {rank} lost at {time.time():.3f}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(STEP_S)
    found = {"rank": rank, "world": world, "weights": [*w.tolist(), b]}
    found["local"] = [os.environ.get("LOCAL_RANK"), os.environ.get("LOCAL_WORLD_SIZE")]
    end()
    # One write: torchrun's workers share its stdout and run unbuffered (``python -u``), where
    # print's two writes (the text, then the newline) of two workers can interleave.
    sys.stdout.write(json.dumps(found) + "\n")
    sys.stdout.flush()


main()
