"""Multi-worker cost, measured side by side in one run.

1. What the cluster step adds to ``import tensorflow``: the import timed inside the
   process with ``DISTRIBUTED=off`` and with ``DISTRIBUTED=k8s`` (TF_CONFIG built, the
   replicas check, the peer watcher started), runs alternating so drift hits both alike;
   medians and their ratio.
2. Steps per second of one custom training loop (a small dense model, tf.function steps)
   for 1 process and for 2 workers under MultiWorkerMirroredStrategy on localhost, the
   workers configured only through tfboot's variables. For reference: on a 2-core
   machine the two workers share the cores.

Usage: python bench/multiworker.py [--runs N] [--steps N]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys

TIMED_IMPORT = (
    "import time; t = time.perf_counter(); import tensorflow; print(time.perf_counter() - t)"
)
LOOP = """
import json, sys, time
import tensorflow as tf
steps = int(sys.argv[1])
strategy = tf.distribute.MultiWorkerMirroredStrategy() if sys.argv[2] == "multi" else None
scope = strategy.scope() if strategy else tf.init_scope()
with scope:
    layers = [tf.Variable(tf.random.stateless_normal([64, 64], [i, 0]) * 0.1) for i in range(4)]
x = tf.random.stateless_normal([32, 64], [9, 9])

def step():
    with tf.GradientTape() as tape:
        h = x
        for w in layers:
            h = tf.tanh(h @ w)
        loss = tf.reduce_mean(tf.square(h))
    grads = tape.gradient(loss, layers)
    if strategy is not None:
        grads = tf.distribute.get_replica_context().all_reduce("sum", grads)
    for w, g in zip(layers, grads):
        w.assign_sub(0.01 * g)

run = tf.function(lambda: strategy.run(step) if strategy else step())
run()  # trace and warm up
start = time.perf_counter()
for _ in range(steps):
    run()
print(json.dumps({"steps_per_s": steps / (time.perf_counter() - start)}))
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        return sock.getsockname()[1]


def base_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIST", "TFBOOT_"))}
    env.pop("TF_CONFIG", None)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return {**env, **extra}


def cluster_env(index: int, ports: list[int]) -> dict[str, str]:
    hosts = "worker=" + ",".join(f"localhost:{p}" for p in ports)
    return {"DISTRIBUTED": "k8s", "DIST_TASKS": str(len(ports)), "DIST_HOSTS": hosts,
            "JOB_COMPLETION_INDEX": str(index), "DIST_REPLICAS_PER_WORKER": "1"}  # fmt: skip


def timed_import(extra: dict[str, str]) -> float:
    out = subprocess.run(
        [sys.executable, "-c", TIMED_IMPORT], env=base_env(extra), capture_output=True,
        text=True, check=True, timeout=300,
    ).stdout  # fmt: skip
    return float(out.strip().splitlines()[-1])


def import_cost(runs: int) -> None:
    off, on = [], []
    ports = [free_port(), free_port()]  # nothing listens: the watcher keeps probing
    for _ in range(runs):
        off.append(timed_import({"DISTRIBUTED": "off"}))
        on.append(timed_import(cluster_env(0, ports)))
    a, b = statistics.median(on), statistics.median(off)
    print(f"import tensorflow, DISTRIBUTED=k8s: {a:.3f} s; DISTRIBUTED=off: {b:.3f} s; "
          f"ratio {a / b:.3f}x (median of {runs} alternating runs)")  # fmt: skip
    step = cluster_step_s(ports)
    print(f"the cluster step alone (plan, TF_CONFIG, watcher started): {step * 1000:.1f} ms, "
          f"{100 * step / b:.2f}% of the import")  # fmt: skip


def cluster_step_s(ports: list[int], repeat: int = 20) -> float:
    """Median time of the cluster step as the import hook runs it, in this process."""
    import time

    from tfboot.adapters.tensorflow import LAUNCH, NAME
    from tfboot.cluster.plan import plan_cluster
    from tfboot.executor.watcher import watch
    from tfboot.settings import resolve

    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        env = base_env(cluster_env(0, ports))
        settings = resolve(env)
        assert settings.cluster is not None
        cluster = plan_cluster(LAUNCH, NAME, "k8s", settings.cluster, env, {"replicas": 1})
        watcher = watch(cluster.peers, 600, quiet=True)
        times.append(time.perf_counter() - start)
        if watcher is not None:
            watcher.child.kill()
            watcher.child.wait()
    return statistics.median(times)


def steps_per_s(workers: int, steps: int) -> list[float]:
    ports = [free_port() for _ in range(workers)]
    mode = "multi" if workers > 1 else "single"
    procs = [
        subprocess.Popen(
            ["timeout", "-s", "KILL", "600", sys.executable, "-c", LOOP, str(steps), mode],
            env=base_env(cluster_env(i, ports) if workers > 1 else {}),
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(workers)
    ]
    return [json.loads(p.communicate()[0].strip().splitlines()[-1])["steps_per_s"] for p in procs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="import runs per case")
    parser.add_argument("--steps", type=int, default=200, help="timed training steps")
    args = parser.parse_args()
    import_cost(args.runs)
    one = steps_per_s(1, args.steps)[0]
    two = steps_per_s(2, args.steps)
    print(f"training loop: 1 process {one:.1f} steps/s; 2 workers "
          f"{', '.join(f'{s:.1f}' for s in two)} steps/s each "
          f"(ratio {min(two) / one:.2f}x per step, global batch doubled)")  # fmt: skip


if __name__ == "__main__":
    main()
