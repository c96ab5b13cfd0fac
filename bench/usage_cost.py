#!/usr/bin/env python3
"""What the usage report costs: its import, one snapshot, and the snapshot thread beside a
training loop, side by side in one run.

1. Import: ``import tfboot.usage`` in fresh interpreters where TensorFlow and tfboot's
   executor and budget are already imported (so only the report's own modules load),
   alternating with the same process importing nothing more (and with the whole report,
   sinks and suggestion too, as the first record loads it); the median differences.
2. One snapshot: the framework's peaks, the cgroup counters, the suggestion and the JSON
   file, timed in-process (median of many); its share of an interval is the thread's cost.
3. Side by side: blocks of training steps (a small dense layer's forward and backward
   pass in a ``tf.function``) alternate, in a shuffled order each round, without, with,
   and again without (the noise floor) a thread taking a snapshot every
   second (30 times more often than the default ``TFBOOT_USAGE_INTERVAL``); the ratio of
   the medians, and the snapshot's share of a step computed from (2).

    .venv/bin/python bench/usage_cost.py [--runs 20] [--blocks 10] [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time

IMPORT = """
import time, tensorflow, tfboot.executor, tfboot.budget
start = time.perf_counter()
if {load} == 1:
    import tfboot.usage
if {load} == 2:
    import tfboot.usage.suggest, tfboot.usage.sinks
print(time.perf_counter() - start)
"""


def import_cost(runs: int) -> tuple[float, float, float]:
    """Median seconds of importing ``tfboot.usage`` (what ``import tensorflow`` adds), of
    the whole report (what the first record has loaded), and of importing nothing."""
    env = dict(os.environ, TFBOOT_DISABLE="1", TF_CPP_MIN_LOG_LEVEL="3")
    found: dict[int, list[float]] = {0: [], 1: [], 2: []}
    for _ in range(runs):
        for load in found:
            out = subprocess.run([sys.executable, "-c", IMPORT.format(load=load)], env=env,
                                 capture_output=True, text=True, check=True).stdout  # fmt: skip
            found[load].append(float(out.split()[-1]))
    return tuple(statistics.median(found[k]) for k in (1, 2, 0))  # type: ignore[return-value]


def in_process(blocks: int, seconds: float) -> dict[str, float]:
    """Snapshot cost, and step throughput with and without the snapshot thread."""
    directory = tempfile.mkdtemp(prefix="tfboot-bench-")
    os.environ.update(CPU_THREADS="2", TFBOOT_USAGE_FILE=os.path.join(directory, "usage.json"),
                      TFBOOT_USAGE_INTERVAL="86400", TFBOOT_LOG="quiet")  # fmt: skip
    import tensorflow as tf
    import tfboot.usage as usage

    report = usage._report
    assert report is not None, "tfboot configured nothing: the report did not start"

    def snapshot() -> None:
        report.meter.sample()  # what the publisher thread does each interval
        report.publish(report.record("snapshot", final=False), time.monotonic() + 2.0)

    costs = []
    for _ in range(200):
        start = time.perf_counter()
        snapshot()
        costs.append(time.perf_counter() - start)
    layer = tf.keras.layers.Dense(512)
    optimizer = tf.keras.optimizers.SGD(0.01)
    x = tf.random.normal((256, 512))

    @tf.function
    def step() -> None:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(layer(x) ** 2)
        optimizer.apply_gradients(zip(tape.gradient(loss, layer.trainable_variables),
                                      layer.trainable_variables, strict=True))  # fmt: skip

    step()

    def block(with_thread: bool) -> float:
        stop = threading.Event()
        thread = None
        if with_thread:

            def loop() -> None:
                while not stop.wait(1.0):
                    snapshot()

            thread = threading.Thread(target=loop, daemon=True)
            thread.start()
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            step()
            count += 1
        elapsed = time.perf_counter() - start
        stop.set()
        if thread is not None:
            thread.join()
        return elapsed / count

    on, off, again = [], [], []  # again: a second side without the thread, the noise floor
    order = random.Random(0)
    for _ in range(blocks):
        sides = [(off, False), (on, True), (again, False)]
        order.shuffle(sides)  # no side always first or last
        for found, with_thread in sides:
            found.append(block(with_thread))
    return {"snapshot": statistics.median(costs), "step_on": statistics.median(on),
            "step_off": statistics.median(off), "step_again": statistics.median(again)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="fresh interpreters per import row")
    parser.add_argument("--blocks", type=int, default=10, help="blocks of steps per side")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of one block")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    loaded, later, nothing = import_cost(args.runs) if args.runs else (0.0, 0.0, 0.0)
    found = in_process(args.blocks, args.seconds)
    rows = {
        "import_ms": (loaded - nothing) * 1e3,
        "whole_report_import_ms": (later - nothing) * 1e3,
        "snapshot_ms": found["snapshot"] * 1e3,
        "step_ms_without_thread": found["step_off"] * 1e3,
        "step_ms_with_thread_1s": found["step_on"] * 1e3,
        "ratio_with_over_without": found["step_on"] / found["step_off"],
        "ratio_without_over_without": found["step_again"] / found["step_off"],
        "thread_share_at_1s": found["snapshot"] / 1.0,
        "thread_share_at_default_30s": found["snapshot"] / 30.0,
    }
    if args.json:
        print(json.dumps(rows))
        return
    print(f"import tfboot.usage (at import tensorflow): {rows['import_ms']:.3f} ms; "
          f"with its sinks and suggestion (all loaded by the first record): "
          f"{rows['whole_report_import_ms']:.3f} ms (medians of {args.runs} fresh "
          "interpreters each)")  # fmt: skip
    print(f"one snapshot (peaks, counters, suggestion, JSON file): {rows['snapshot_ms']:.3f} ms")
    print(f"training step: {rows['step_ms_without_thread']:.3f} ms without the thread, "
          f"{rows['step_ms_with_thread_1s']:.3f} ms with a snapshot every 1 s: "
          f"{rows['ratio_with_over_without']:.4f}x (two sides without it: "
          f"{rows['ratio_without_over_without']:.4f}x, the noise floor)")  # fmt: skip
    print(f"the thread's share of each step: {rows['thread_share_at_1s']:.4%} at 1 s, "
          f"{rows['thread_share_at_default_30s']:.5%} at the default 30 s")  # fmt: skip


if __name__ == "__main__":
    main()
