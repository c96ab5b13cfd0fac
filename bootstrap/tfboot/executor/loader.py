"""PyTorch's DataLoader under the container's budget: its workers against the CPU quota, its
batches against ``/dev/shm``, said before they break, and a full ``/dev/shm`` named with its
fix for the engine the job runs on. What a loader needs and what is said are
``budget.dataloader``'s (pure); this module wraps PyTorch, reads the quota, ``/dev/shm`` and
the memory limit as they are, and words the fix for the engine.

Nothing the program passed is changed; every wrapper calls PyTorch's own code with the
same arguments and returns what it returns, and an error of it (the program's dataset or
collate function, in a worker or not) goes on with the frames it has without tfboot
(``frames.hidden``).

- When a loader's workers start (``_MultiProcessingDataLoaderIter.__init__``): one warning
  when ``num_workers`` and the main process are more processes than the CPU quota, read as
  they start (a quota moved by a resize since the import is the one judged). Each
  worker runs PyTorch's ``torch.set_num_threads(1)`` itself, after tfboot's import in a
  spawned worker, so a worker has one thread.
- At the first batch each iterator's main process receives (``_process_data``; a new
  iterator each epoch, unless its workers persist), judged against ``/dev/shm`` and the
  memory limit as they are then (a resize since the import, or of ``/dev/shm`` itself,
  counts): the loader holds up to ``num_workers x prefetch_factor`` batches in
  ``/dev/shm`` and one in use; one warning when that is more than ``/dev/shm``'s size, or
  than the memory limit leaves, said once for each size and limit. A warning, not an
  error: the estimate is
  taken from the first batch, and a loader whose later batches are smaller, or whose main
  process keeps up, runs.
- A worker is the main process's guest: no GPU cap of its own should it start CUDA
  (``patches.torch_caps``: the cap is the main process's budget). Its usage is a member
  of the task's job record, as any child's, so that its memory counts where the task's
  process tree is what is measured.
- Where PyTorch then cannot allocate a batch there (``UntypedStorage._new_shared`` raising
  ``ENOSPC``, in the worker, PyTorch 2.13's "unable to allocate shared memory(shm)") or a
  worker dies of SIGBUS writing to it (older versions), the job's error says what was
  needed, what ``/dev/shm`` has, and how to give it more, chained to PyTorch's own.
- Where it fails instead as the worker's queue sends a batch to the main process (a batch
  the collate function made outside ``/dev/shm``, moved there as it is pickled, in the
  queue's feeder thread), ``multiprocessing`` prints the error and drops the batch, and the
  main process waits for it for ever (pytorch#1355). The worker's queue
  (``_worker_loop``'s ``data_queue``) sends that error in the batch's place instead, as the
  worker's own loop sends any error of a batch, so the main process raises it.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ..budget.dataloader import PREFETCH, Batches, full_error, full_give, judge, over_quota
from ..frames import hidden
from ..node.cpu import cpu_budget
from ..node.hostmem import memory_budget
from ..node.shm import give_more, in_docker, read_shm, used_bytes
from .result import emit
from .wrapping import replace

FULL = ("No space left on device", "unable to write to file", "unable to allocate shared memory")
# The loader whose workers started last in this process: num_workers and prefetch_factor
# (a forked worker inherits it; a spawned one takes PyTorch's default prefetch).
_loader: dict[str, int] = {}
_said: set[str] = set()  # what this process already warned about, once each
JUDGED = "_tfboot_judged"  # set on an iterator whose first batch was judged
_peak = [0]  # the most /dev/shm held when a batch arrived, in bytes (``shm_peak``)


def in_worker() -> bool:
    """This process is a DataLoader's worker: PyTorch set its worker info (from the start of
    its worker loop). Read without importing anything."""
    worker = sys.modules.get("torch.utils.data._utils.worker")
    return getattr(worker, "_worker_info", None) is not None


def shm_peak() -> int:
    """The most ``/dev/shm`` held as a batch arrived in this process so far, in bytes."""
    return _peak[0]


def install(torch: ModuleType, quota: float | None, quota_source: str, quiet: bool) -> None:
    """Wrap the loader's workers' start, its first batch, its errors, and the workers'
    allocation of a batch in shared memory."""
    from torch.utils.data import dataloader
    from torch.utils.data._utils import worker

    workers = dataloader._MultiProcessingDataLoaderIter
    replace(workers, "__init__", lambda f: _starting(f, quota, quota_source, quiet))
    replace(workers, "_process_data", lambda f: _first_batch(f, quiet))
    replace(workers, "_next_data", _bus_error)
    replace(torch.UntypedStorage, "_new_shared", _full, static=True)
    replace(worker, "_worker_loop", _feeding)


def _once(key: str, quiet: bool, text: str) -> None:
    if key not in _said:
        _said.add(key)
        if not quiet:
            emit("warning", text)


def _starting(original: Callable[..., Any], quota: float | None, source: str,
              quiet: bool) -> Callable[..., Any]:  # fmt: skip
    @functools.wraps(original)
    def init(self: Any, loader: Any, *args: Any, **kwargs: Any) -> None:
        workers = int(loader.num_workers)
        _loader.update(workers=workers, prefetch=int(loader.prefetch_factor or PREFETCH))
        verdict = over_quota(workers, *_quota_now(quota, source))
        if verdict is not None:
            _once(verdict.key, quiet, verdict.said())
        with hidden:
            original(self, loader, *args, **kwargs)

    return init


def _quota_now(planned: float | None, source: str) -> tuple[float | None, str]:
    """The CPU quota as a loader starts (a resize since the import counts: its workers are
    started now); the import's where it cannot be read."""
    found = cpu_budget()
    return (planned, source) if found.problem else (found.quota, found.quota_source)


def _first_batch(original: Callable[..., Any], quiet: bool) -> Callable[..., Any]:
    @functools.wraps(original)
    def process(self: Any, data: Any, *args: Any) -> Any:
        held = used_bytes()
        if held is not None and held > _peak[0]:
            _peak[0] = held
        if not getattr(self, JUDGED, False):  # each iterator's first batch: as things are now
            size = _nbytes(data)
            if size:
                setattr(self, JUDGED, True)
                _judge(self._num_workers, self._prefetch_factor, size, quiet)
        with hidden:
            return original(self, data, *args)

    return process


def _judge(workers: int, prefetch: int, size: int, quiet: bool) -> None:
    """What ``workers`` with ``prefetch`` batches of ``size`` bytes each hold in ``/dev/shm``,
    against its size and the memory limit as they are now (``budget.dataloader.judge``)."""
    memory = memory_budget(working=True)
    verdict = judge(Batches(workers, prefetch, size), read_shm(), memory.limit_mib,
                    memory.working_mib)  # fmt: skip
    if verdict is not None:
        fix = "" if verdict.give_mib is None else _fix(verdict.give_mib)
        _once(verdict.key, quiet, verdict.said(fix))


def _bus_error(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def next_data(self: Any) -> Any:
        try:
            with hidden:
                return original(self)
        except RuntimeError as exc:
            if "Bus error" not in str(exc):
                raise
            workers, prefetch = self._num_workers, self._prefetch_factor
            raise RuntimeError(_full_text(None, workers, prefetch)) from exc

    return next_data


def _full(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def new_shared(size: int, *args: Any, **kwargs: Any) -> Any:
        try:
            with hidden:
                return original(size, *args, **kwargs)
        except RuntimeError as exc:
            if not _is_full(exc):
                raise
            raise RuntimeError(_worker_text(size)) from exc

    return new_shared


def _is_full(error: BaseException) -> bool:
    """``error`` is PyTorch's for a full ``/dev/shm``."""
    return isinstance(error, RuntimeError) and any(text in str(error) for text in FULL)


def _worker_text(size: int | None, sending: bool = False) -> str:
    """``_full_text`` for this worker's loader (its workers, its prefetch factor)."""
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    workers = info.num_workers if info is not None else _loader.get("workers", 1)
    return _full_text(size, workers, _loader.get("prefetch", PREFETCH), sending)


def _feeding(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def worker_loop(*args: Any, **kwargs: Any) -> Any:
        queue = kwargs.get("data_queue", args[3] if len(args) > 3 else None)
        default = getattr(queue, "_on_queue_feeder_error", None)
        if default is not None:
            queue._on_queue_feeder_error = functools.partial(_unsent, queue, default)
        with hidden:
            return original(*args, **kwargs)

    return worker_loop


def _unsent(queue: Any, default: Callable[[BaseException, object], None],
            error: BaseException, sent: object) -> None:  # fmt: skip
    """A worker's queue could not send ``sent``, ``(index, batch)``: where ``/dev/shm`` was
    full, the error goes in the batch's place, as the worker's loop sends any batch's error
    (the main process raises it at that index); any other error, as ``multiprocessing``
    has it (printed, the item dropped)."""
    if not (_is_full(error) and isinstance(sent, tuple) and len(sent) == 2
            and isinstance(sent[0], int)):  # fmt: skip
        default(error, sent)
        return
    from torch._utils import ExceptionWrapper
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    try:
        raise RuntimeError(_worker_text(_nbytes(sent[1]) or None, sending=True)) from error
    except RuntimeError:
        where = f"in DataLoader worker process {info.id}" if info is not None else "in a worker"
        queue.put((sent[0], ExceptionWrapper(where=where)))


def _full_text(size: int | None, workers: int, prefetch: int, sending: bool = False) -> str:
    """The error for a full ``/dev/shm`` as it is now (``budget.dataloader.full_error``), with
    the fix for the engine."""
    shm = read_shm()
    fix = _fix(full_give(workers, prefetch, size, shm.size_mib))
    return full_error(workers, prefetch, size, shm, fix, sending)


def _fix(mib: int) -> str:
    """How to give ``/dev/shm`` ``mib`` MiB on the engine this job runs on: its own
    (``cluster.engines.shm_fix``), else Docker's."""
    from ..cluster.engines import shm_fix

    return shm_fix(mib, os.environ) or give_more(mib, in_docker())


def _nbytes(data: Any) -> int:
    """The bytes of the tensors in a batch (nested lists, tuples and dicts)."""
    if hasattr(data, "untyped_storage") and hasattr(data, "element_size"):
        return int(data.numel() * data.element_size())
    if isinstance(data, dict):
        return sum(_nbytes(value) for value in data.values())
    if isinstance(data, list | tuple):
        return sum(_nbytes(value) for value in data)
    return 0
