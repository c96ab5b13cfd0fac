"""A tf.data consumer in a container with a memory limit: large elements, AUTOTUNE, and a
consumer that stops between bursts (an evaluation, a checkpoint) while the pipeline fills.

Usage: python3 bursty.py MIB STEPS BURST PAUSE_S. Prints one JSON line: the peak working set
(the cgroup's usage minus inactive file cache, as kubelet counts it), sampled every 20 ms,
and the limit. Run by tests/docker/test_container_host_memory.py.
"""

import json
import os
import sys
import threading
import time

import tensorflow as tf

mib, steps, burst = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
pause = float(sys.argv[4])
FILES = (
    ("/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory.stat", "inactive_file",
     "/sys/fs/cgroup/memory.max"),
    ("/sys/fs/cgroup/memory/memory.usage_in_bytes", "/sys/fs/cgroup/memory/memory.stat",
     "total_inactive_file", "/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)  # fmt: skip
usage, stat, key, limit = next(f for f in FILES if os.path.exists(f[0]))


def working_set() -> float:
    with open(stat) as lines:
        fields = dict(line.split() for line in lines)
    with open(usage) as text:
        return (int(text.read()) - int(fields.get(key, 0))) / 2**20


highest = [0.0]


def sample() -> None:
    while True:
        highest[0] = max(highest[0], working_set())
        time.sleep(0.02)


threading.Thread(target=sample, daemon=True).start()
floats = int(mib * 2**20 / 4)


def make(i: tf.Tensor) -> tf.Tensor:
    return tf.random.stateless_uniform([floats], seed=tf.stack([i, tf.constant(7, tf.int64)]))


dataset = tf.data.Dataset.range(10**9).map(make, num_parallel_calls=tf.data.AUTOTUNE)
dataset = dataset.prefetch(tf.data.AUTOTUNE)
total = 0.0
for step, element in enumerate(dataset.take(steps)):
    total += float(element[0])
    if pause and (step + 1) % burst == 0:
        time.sleep(pause)
with open(limit) as text:
    limit_mib = int(text.read().strip()) / 2**20
print(json.dumps({"working_set_mib": highest[0], "limit_mib": limit_mib}))
