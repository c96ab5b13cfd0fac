"""Where TensorFlow's start-up becomes unreasonable as its thread pools grow.

For each thread count, a fresh process imports TensorFlow, sets both pools
(``tf.config.threading``, as ``CPU_THREADS`` does), and times the first op,
``tf.constant(1)``, which starts the runtime and creates the pools. A run that has not
finished within the timeout is reported as such. The counts alternate with a baseline
of TensorFlow's default pools, so the ratios come from one run.

Usage: python bench/thread_ceiling.py [--counts 64,256,...] [--timeout S] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

FIRST_OP = """
import sys, time
import tensorflow as tf
n = int(sys.argv[1])
if n:
    tf.config.threading.set_intra_op_parallelism_threads(n)
    tf.config.threading.set_inter_op_parallelism_threads(n)
t = time.perf_counter()
tf.constant(1)
print(time.perf_counter() - t)
"""


def first_op(threads: int, timeout: float) -> float | str:
    """Seconds to the first op with ``threads`` per pool (0: TF's default), or what went wrong."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_NUM_")}
    env.update(TFBOOT_DISABLE="1", TF_CPP_MIN_LOG_LEVEL="2")
    try:
        run = subprocess.run(
            [sys.executable, "-c", FIRST_OP, str(threads)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return f"not done after {timeout:g} s"
    if run.returncode:
        return f"failed (exit status {run.returncode})"
    return float(run.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="64,256,1024,4096,16384")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    print(f"python {sys.version.split()[0]}; {len(os.sched_getaffinity(0))} schedulable CPUs")
    print(f"{'threads per pool':>16} {'first op (median)':>18} {'vs default':>11}")
    for count in counts:
        base, timed = [], []
        for _ in range(args.rounds):
            base.append(first_op(0, args.timeout))
            outcome = first_op(count, args.timeout)
            if isinstance(outcome, str):
                print(f"{count:>16} {outcome}", flush=True)
                break  # a timeout or a crash is the answer; no more rounds for it
            timed.append(outcome)
        else:
            a = statistics.median(timed)
            b = statistics.median(x for x in base if isinstance(x, float))
            print(f"{count:>16} {a * 1e3:>15.1f} ms {a / b:>10.1f}x", flush=True)


if __name__ == "__main__":
    main()
