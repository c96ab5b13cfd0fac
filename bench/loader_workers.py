"""What tfboot costs a PyTorch DataLoader worker that is a fresh interpreter.

A worker started by spawn or forkserver (Python 3.14's default) imports ``torch`` again,
and tfboot runs there as in any child of a task. This times, side by side in one run,
alternating, a DataLoader of ``--workers`` workers from ``iter(loader)`` to its first batch
(the workers' start and their ``import torch`` dominate) with tfboot on and with
``TFBOOT_DISABLE=1``, and the same for fork (workers inherit the parent: nothing runs
again). Medians and their ratio; no time is asserted.

    python bench/loader_workers.py --runs 10
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = """
import json, sys, time
import torch
from torch.utils.data import DataLoader, Dataset

class Items(Dataset):
    def __len__(self): return 64
    def __getitem__(self, index): return torch.full((64, 64), float(index))

if __name__ == "__main__":
    loader = DataLoader(Items(), batch_size=8, num_workers=int(sys.argv[1]),
                        multiprocessing_context=sys.argv[2])
    start = time.perf_counter()
    next(iter(loader))
    print(json.dumps({"first_batch_s": time.perf_counter() - start}))
"""


def first_batch(script: str, context: str, workers: int, disabled: bool) -> float:
    env = {**os.environ, "TFBOOT_DISABLE": "1" if disabled else "0"}
    done = subprocess.run([sys.executable, script, str(workers), context], env=env,
                          capture_output=True, text=True, timeout=600, check=True)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])["first_batch_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    print("| start method | with tfboot | without | ratio |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:  # spawned workers import the script's classes
        script = os.path.join(folder, "loader_job.py")
        with open(script, "w", encoding="utf-8") as out:
            out.write(CHILD)
        for context in ("forkserver", "spawn", "fork"):
            on, off = [], []
            for _ in range(args.runs):
                on.append(first_batch(script, context, args.workers, False))
                off.append(first_batch(script, context, args.workers, True))
            a, b = statistics.median(on), statistics.median(off)
            print(f"| {context} | {a:.3f} s | {b:.3f} s | {a / b:.3f}x |", flush=True)


if __name__ == "__main__":
    main()
