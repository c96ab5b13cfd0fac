"""A few steps of a custom training loop on fixed global batches; prints the weights as JSON.

``python mw_train.py multi`` trains under MultiWorkerMirroredStrategy, configured only by
what tfboot put in TF_CONFIG at ``import tensorflow``; ``single`` trains one process on the
same global batches, as the reference.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

STEPS = 4
GLOBAL_BATCH = 12  # divisible by 1, 2 and 3 tasks
LEARNING_RATE = 0.1


def global_batches() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(STEPS, GLOBAL_BATCH, 4)).astype("float32")
    y = (x @ np.array([[1.0], [2.0], [-1.0], [0.5]], dtype="float32") + 0.3).astype("float32")
    return x, y


def main(mode: str) -> None:
    strategy = tf.distribute.MultiWorkerMirroredStrategy() if mode == "multi" else None
    tasks, rank = 1, 0
    if strategy is not None:
        resolver = strategy.cluster_resolver
        spec = resolver.cluster_spec().as_dict()
        order = [(t, i) for t in ("chief", "worker") for i in range(len(spec.get(t, [])))]
        tasks, rank = len(order), order.index((resolver.task_type, resolver.task_id))
    with strategy.scope() if strategy else tf.init_scope():
        w = tf.Variable(tf.zeros([4, 1]))
        b = tf.Variable(tf.zeros([1]))

    def step(x: tf.Tensor, y: tf.Tensor) -> None:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(tf.matmul(x, w) + b - y)) / GLOBAL_BATCH
        grads = tape.gradient(loss, [w, b])
        if strategy is not None:
            grads = tf.distribute.get_replica_context().all_reduce("sum", grads)
        for var, grad in zip((w, b), grads, strict=False):
            var.assign_sub(LEARNING_RATE * grad)

    x, y = global_batches()
    share = GLOBAL_BATCH // tasks
    for s in range(STEPS):
        local = slice(rank * share, (rank + 1) * share)
        args = (tf.constant(x[s, local]), tf.constant(y[s, local]))
        strategy.run(step, args=args) if strategy else step(*args)
    replicas = strategy.num_replicas_in_sync if strategy else 1
    weights = np.concatenate([w.numpy().ravel(), b.numpy().ravel()]).tolist()
    slurm = {name: os.environ.get(name) for name in ("SLURM_JOB_ID", "SLURM_STEP_ID")}
    print(json.dumps({"weights": weights, "replicas": replicas, "rank": rank,
                      "tf_config": os.environ.get("TF_CONFIG"), "slurm": slurm}),
          flush=True)  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1])
