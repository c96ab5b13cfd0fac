"""A PyTorch program whose own code raises through tfboot's wrappers: a DataLoader's
collate function, dataset and sampler, with no worker, forked workers and a spawned one,
and ``init_process_group`` refusing the program's arguments (under the start-up deadline).
Prints what each error shows (``shown.report``)."""

from collections.abc import Iterator

import torch.distributed as dist
from shown import report
from torch.utils.data import DataLoader, Dataset, Sampler


def collate(batch: list) -> None:
    raise ValueError("the collate function's own error")


class Broken(Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> int:
        raise KeyError(f"the dataset's own error at {index}")


class Order(Sampler):
    def __len__(self) -> int:
        return 4

    def __iter__(self) -> Iterator[int]:
        raise LookupError("the sampler's own error")


def loop(workers: int, dataset: object = None, **given: object) -> None:
    data = list(range(4)) if dataset is None else dataset
    for _ in DataLoader(data, batch_size=2, num_workers=workers, **given):
        pass


if __name__ == "__main__":
    report({
        "collate, no worker": lambda: loop(0, collate_fn=collate),
        "dataset, no worker": lambda: loop(0, Broken()),
        "collate, 2 forked workers": lambda: loop(2, collate_fn=collate),
        "dataset, 2 forked workers": lambda: loop(2, Broken()),
        "sampler, 2 forked workers": lambda: loop(2, sampler=Order()),
        "collate, a spawned worker": lambda: loop(1, collate_fn=collate,
                                                  multiprocessing_context="spawn"),
        "init_process_group": lambda: dist.init_process_group(
            "gloo", init_method="nowhere://", rank=0, world_size=2),
    })  # fmt: skip
