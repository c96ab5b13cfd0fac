"""Shapes where memory kept for reuse could cost a job its life, or its speed, in a container.

Usage: python3 kept.py SHAPE [ARG]. Imports TensorFlow (tfboot's governor starts there), runs
SHAPE and prints one JSON line with what tfboot's governor did, if one runs:

- ``resize MIB``: frees 400 MiB of 8 MiB arrays below a live block, says ``freed``, waits for
  the container's limit to fall (``docker update``), then a second process touches MIB MiB,
  then this one; says ``resized`` and waits for the limit to rise again;
- ``burst``: frees 180 MiB of 1 MiB temporaries, then two bursts inside single calls that
  hold the interpreter lock, each sized from the working set before the temporaries so that
  without tfboot the job peaks at ``FILL`` of the limit: ``bytes * n`` in a thread, and
  ``json.loads`` of a COCO-like annotations document;
- ``cache MIB`` / ``shm MIB``: fills MIB MiB of active page cache (a file written and read
  twice) or of ``/dev/shm``, then NumPy temporaries of 8 MiB, counting their page faults.

Run by tests/docker/test_container_kept_memory.py.
"""

import json
import os
import resource
import subprocess
import sys
import threading
import time

import numpy as np
import tensorflow  # noqa: F401  (tfboot configures it and starts its governor)

CGROUP = "/sys/fs/cgroup/memory"
MIB = 1 << 20
FILL = 0.92  # of the limit: where a burst takes the job without tfboot


def number(name, key=None):
    with open(f"{CGROUP}/{name}") as source:
        text = source.read()
    if key is None:
        return int(text)
    return next(int(line.split()[1]) for line in text.splitlines() if line.split()[0] == key)


def working():
    return number("memory.usage_in_bytes") - number("memory.stat", "total_inactive_file")


def resident():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def say(word):
    print(word, flush=True)


def wait_for(test, seconds=180):
    deadline = time.monotonic() + seconds
    while not test():
        if time.monotonic() > deadline:
            raise SystemExit("the limit never moved")
        time.sleep(0.05)


def resize(mib):
    found = {"before_mib": number("memory.limit_in_bytes") // MIB}
    arrays = [np.ones(MIB, dtype=np.int64) for _ in range(50)]  # 50 x 8 MiB, from the heap
    live = np.ones(1000)  # a live block above them: no trim threshold returns what lies below
    del arrays
    time.sleep(2)  # the governor's readings
    found["resident_after_free_mib"] = resident() // MIB
    say("freed")
    wait_for(lambda: number("memory.limit_in_bytes") // MIB < found["before_mib"])
    time.sleep(1.5)  # a second process starts after the resize
    found["resident_after_resize_mib"] = resident() // MIB
    second = subprocess.run([sys.executable, "-c", f"b = bytearray({mib} << 20)"], check=False)
    found["second_exit"] = second.returncode
    mine = bytearray(mib * MIB)  # and the job itself, in one call, after the second is gone
    del mine
    say("resized")
    wait_for(lambda: number("memory.limit_in_bytes") // MIB >= found["before_mib"])
    time.sleep(1.5)
    del live
    return found


def coco(records):
    return json.dumps({"annotations": [
        {"id": i, "image_id": 100000 + i // 7, "category_id": i % 80 + 1,
         "bbox": [i % 640 + 0.5, i % 480 + 0.25, 32.5, 48.75], "area": 1584.375, "iscrowd": 0}
        for i in range(records)]})  # fmt: skip


def burst():
    limit = number("memory.limit_in_bytes")
    sample = coco(20000)
    before = resident()
    parsed = json.loads(sample)
    per_record = max(1, resident() - before) / 20000  # what a parsed record takes
    del parsed, sample
    records = int(0.3 * limit / per_record)
    text = coco(records)  # the document, read before the job's work
    base = working()  # before anything is freed: the job's own memory
    temporaries = [bytearray(MIB) for _ in range(180)]
    del temporaries  # freed: kept for reuse, or not
    time.sleep(2)
    found = {"limit_mib": limit // MIB, "base_mib": base // MIB}
    size = int(FILL * limit - base)
    thread = threading.Thread(target=lambda: len(b"\x01" * size))  # holds the lock throughout
    thread.start()
    thread.join()
    found["bytes_burst_mib"] = size // MIB
    time.sleep(2)
    start = time.monotonic()
    parsed = json.loads(text)  # one call, the lock held throughout
    found["json_seconds"] = round(time.monotonic() - start, 2)
    found["json_burst_mib"] = int(len(parsed["annotations"]) * per_record) // MIB
    found["planned_peak"] = round((base + max(size, found["json_burst_mib"] * MIB)) / limit, 3)
    return found


def fill(where, mib):
    path = "/dev/shm/fill" if where == "shm" else "/tmp/fill"
    block = b"\x07" * (8 * MIB)
    with open(path, "wb") as sink:
        for _ in range(mib // 8):
            sink.write(block)
    if where == "cache":
        for _ in range(2):  # read twice: active page cache, as an epoch re-reads its dataset
            with open(path, "rb") as source:
                while source.read(8 * MIB):
                    pass
    n = 8 * MIB // 8
    for _ in range(3):
        a = np.ones(n)
        del a
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(150):
        a = np.ones(n)
        b = a * 2.0
        c = b + a
        del a, b, c
    stat = {k: number("memory.stat", k) // MIB for k in ("total_active_file", "total_shmem")}
    return {"faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before,
            "working_mib": working() // MIB, **stat}  # fmt: skip


shape, *rest = sys.argv[1:]
if shape == "resize":
    result = resize(int(rest[0]))
elif shape == "burst":
    result = burst()
else:
    result = fill(shape, int(rest[0]))
try:
    from tfboot.executor.governor import current
except ImportError:  # tfboot is off or absent
    current = None
found = current() if current is not None else None
result["governor"] = None if found is None else found.stats()
print(json.dumps(result))
