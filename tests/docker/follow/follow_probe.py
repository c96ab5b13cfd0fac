"""A job whose CPU quota ``docker update --cpus`` moves while it runs.

Usage: python3 follow_probe.py FRAMEWORK. Imports FRAMEWORK (``torch``, ``tensorflow`` or
``jax``; tfboot configures it), says ``started``, then twice: waits for the container's quota
to move, works 5 s (PyTorch: optimizer steps) and says ``moved`` with PyTorch's intra-op
count. Prints one JSON line at the end: the counts seen. Run by
tests/docker/test_container_follow.py.
"""

import json
import sys
import time

framework = sys.argv[1]
module = __import__(framework)
QUOTA = "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"


def quota():
    with open(QUOTA) as source:
        return int(source.read())


def work(seconds):
    end = time.monotonic() + seconds
    if framework != "torch":
        time.sleep(seconds)
        return None
    torch = module
    model = torch.nn.Linear(256, 256)
    opt = torch.optim.SGD(model.parameters(), 0.1)
    x = torch.randn(512, 256)
    while time.monotonic() < end:
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    return torch.get_num_threads()


seen = [work(0.5)]
print("started", flush=True)
for _ in range(2):
    before = quota()
    while quota() == before:
        time.sleep(0.1)
    seen.append(work(5))
    print("moved", flush=True)
print(json.dumps({"threads": seen}), flush=True)
