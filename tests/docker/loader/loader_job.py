"""A DataLoader with real workers reading a map-style dataset of float32 tensors.

``python loader_job.py ITEM_MIB BATCH WORKERS [CONTEXT [COLLATE]]``: items of ``ITEM_MIB``
MiB, batches of ``BATCH`` items, ``WORKERS`` workers started by ``CONTEXT`` (fork, spawn,
forkserver; the interpreter's default if absent or ``default``), batches made by PyTorch's
``default_collate`` (in ``/dev/shm`` already, in a worker) or, with ``COLLATE`` ``own``, by
a collate function of the program's own, as a padding collator is (a fresh tensor, moved to
``/dev/shm`` as the worker's queue sends it). Prints, as JSON, the sum of the items' first
elements and the thread counts the workers ran with.
"""

import json
import sys

import torch
from torch.utils.data import DataLoader, Dataset

ITEMS = 36


class Items(Dataset):
    def __init__(self, mib: int) -> None:
        self.shape = (mib, 256, 1024)  # float32: mib MiB

    def __len__(self) -> int:
        return ITEMS

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return torch.full(self.shape, float(index)), torch.get_num_threads()


def own(items: list[tuple[torch.Tensor, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """A collate function of the program's own: its batch is a fresh tensor."""
    return torch.stack([x for x, _ in items]), torch.tensor([n for _, n in items])


def main() -> None:
    mib, batch, workers = (int(x) for x in sys.argv[1:4])
    context = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] != "default" else None
    collate = own if sys.argv[5:] == ["own"] else None
    loader = DataLoader(Items(mib), batch_size=batch, num_workers=workers,
                        multiprocessing_context=context, collate_fn=collate)  # fmt: skip
    total, threads = 0.0, set()
    for items, counts in loader:
        total += float(items[:, 0, 0, 0].sum())
        threads.update(int(c) for c in counts)
    print(json.dumps({"total": total, "worker_threads": sorted(threads)}), flush=True)


if __name__ == "__main__":
    main()
