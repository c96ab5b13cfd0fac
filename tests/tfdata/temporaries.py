"""NumPy temporaries after ``import tensorflow``: the work a job does while memory is plentiful.

Usage: python3 temporaries.py MIB ROUNDS. Each round makes three arrays of MIB MiB and frees
them. Prints one JSON line: the minor page faults of the rounds (``getrusage``; a fresh
mapping per array shows as 256 faults a MiB) and what tfboot's memory governor did, if one
runs. Run by tests/docker/test_container_host_memory.py.
"""

import json
import resource
import sys

import numpy as np
import tensorflow  # noqa: F401  (tfboot configures it; the work is NumPy's)

mib, rounds = int(sys.argv[1]), int(sys.argv[2])
n = mib * 2**20 // 8
for _ in range(3):  # glibc settles its thresholds on the first frees
    a = np.ones(n)
    del a
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(rounds):
    a = np.ones(n)
    b = a * 2.0
    c = b + a
    del a, b, c
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
try:
    from tfboot.executor.governor import current
except ImportError:  # tfboot is off or absent
    current = None  # type: ignore[assignment]
found = current() if current is not None else None
print(json.dumps({"faults": faults, "governor": None if found is None else found.stats()}))
