"""A task of a PyTorch job that starts children of every kind; prints one JSON line.

``python children.py MODEL PORT``: this process imports torch as a task of the cluster its
variables give, then starts two children by ``MODEL`` and collects what each reports:

- ``mp.spawn``: PyTorch's DDP tutorial: ``MASTER_ADDR``/``MASTER_PORT`` set here (after
  ``import torch``, as the tutorial's parent does), ``torch.multiprocessing.spawn`` one
  rank per child, and each child forms a gloo group of its own with ``rank`` and
  ``world_size`` passed, all-reduces and ends it;
- ``fork``, ``spawn``, ``forkserver``: a ``multiprocessing`` pool of that start method whose
  children import torch;
- ``loader-fork``, ``loader-forkserver``: a DataLoader's workers of that start method;
- ``subprocess``: a fresh interpreter that imports torch.

Each child reports tfboot's cluster line and error in it (``results()``), its
``RANK``, ``MASTER_ADDR`` and ``TFBOOT_TASK``; the parent adds its own pid and line.
"""

import json
import os
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def seen(value: object = None) -> dict:
    from tfboot.executor import results

    result = results().get("torch")
    line = result.cluster.line() if result is not None and result.cluster is not None else None
    return {"pid": os.getpid(), "line": line, "error": None if result is None else result.error,
            "rank": os.environ.get("RANK"), "master": os.environ.get("MASTER_ADDR"),
            "task": os.environ.get("TFBOOT_TASK"), "value": value}  # fmt: skip


def rank(index: int, world: int, queue) -> None:
    dist.init_process_group("gloo", rank=index, world_size=world)
    tensor = torch.ones(1) * (index + 1)
    dist.all_reduce(tensor)
    dist.destroy_process_group()
    queue.put(seen(float(tensor[0])))


def child(_: int) -> dict:
    import torch  # noqa: F401  (a fresh interpreter imports it here: tfboot plans)

    return seen()


class Rows(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: int) -> str:
        return json.dumps(seen())


def main() -> None:
    model, port = sys.argv[1], sys.argv[2]
    found = []
    if model == "mp.spawn":
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "localhost", port
        queue = mp.get_context("spawn").SimpleQueue()
        mp.spawn(rank, args=(2, queue), nprocs=2, join=True)
        found = [queue.get() for _ in range(2)]
    elif model in ("fork", "spawn", "forkserver"):
        with mp.get_context(model).Pool(2) as pool:
            found = pool.map(child, range(2))
    elif model.startswith("loader-"):
        context = model.partition("-")[2]
        loader = torch.utils.data.DataLoader(Rows(), batch_size=None, num_workers=2,
                                             multiprocessing_context=context)  # fmt: skip
        found = [json.loads(row) for row in loader]
    else:
        code = "import json, torch, children; print(json.dumps(children.seen()))"
        for _ in range(2):
            done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                  env={**os.environ, "PYTHONPATH": os.path.dirname(__file__)},
                                  check=True)  # fmt: skip
            found.append(json.loads(done.stdout.splitlines()[-1]))
    print(json.dumps({"parent": seen(), "children": found}))


if __name__ == "__main__":
    main()
