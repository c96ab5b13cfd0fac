"""The host-memory governor: freed memory kept while it is plentiful, given back when it is short.

One daemon thread per process (``tfboot-memory``) reads the working set (``node.workingset``)
against the levels of ``budget.malloc.Watch`` and acts through glibc, by ``ctypes``:

- as it starts, glibc's thresholds are set to keep freed memory for reuse (``keep``: the
  mmap threshold where glibc's own adjustment ends, the trim threshold ``watch.keep``);
- below ``trim_at`` it does nothing but read, at intervals paced by the distance to
  ``hold_at`` (the working set could not cross it between two readings even growing at
  ``RATE``), from ``FAST_S`` to ``SLOW_S``;
- from ``trim_at``, the trim threshold goes back to glibc's own, and ``malloc_trim(0)`` runs
  each time the working set has grown by ``STEP`` of the limit since the last trim (a
  process that lives there pays one trim, not one per block);
- from ``hold_at``, ``mallopt(M_MMAP_THRESHOLD, 1 MiB)`` as well, so freed large blocks are
  unmapped at once, and trims follow the working set at a finer step; after ``CALM_S`` under
  ``trim_at`` memory is kept again;
- while the working set cannot be read, glibc's own trim threshold, as when short: nothing
  is kept that only a reading would give back.

What it did is counted (``stats``) for the info line, ``tfboot doctor`` and the usage report:
the trims, the bytes this process's resident set fell by across them, the holds and how
long they lasted. A forked child (a DataLoader worker, a ``multiprocessing`` child) starts
its own governor: the cgroup counts its heap too; a fresh interpreter that imports a
framework gets one from tfboot's hook. The thread holds no lock a fork could copy taken
(its state is plain numbers; glibc serialises ``malloc_trim`` with ``fork`` itself), and
``ctypes`` lets go of the interpreter lock during each call.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
from typing import Any

from ..budget.malloc import (
    CALM_S,
    KEEP_MMAP,
    LOOSE_TRIM,
    M_MMAP_THRESHOLD,
    M_TRIM_THRESHOLD,
    MMAP_THRESHOLD,
    Watch,
)
from ..node.cpu import cgroup_root
from ..node.workingset import reader, resident

FAST_S = 0.01  # the shortest interval between two readings
SLOW_S = 1.0  # the longest
RATE = 4 << 30  # bytes a second the working set is assumed able to grow at, for the pacing
STEP = 0.02  # of the limit: growth that earns another trim while not held
HELD_STEP = 0.005  # the same while held


class Governor:
    """One process's governor: its levels, its reader, what it did."""

    def __init__(self, watch: Watch, root: str = "/", parent: Governor | None = None) -> None:
        """A governor reading ``root``'s cgroup files; a forked child's takes its ``parent``'s
        reader and glibc's functions as they are (open files, resolved symbols: the child
        opens and loads nothing, so no lock a fork copied taken is ever waited on)."""
        self.watch = watch
        if parent is not None:
            self.reader, self._trim, self._mallopt = parent.reader, parent._trim, parent._mallopt
        else:
            self.reader = reader(root, watch.limit_file)
            libc = ctypes.CDLL(None)
            self._trim, self._mallopt = libc.malloc_trim, libc.mallopt
            self._trim.argtypes, self._trim.restype = (ctypes.c_size_t,), ctypes.c_int
            self._mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
            self._mallopt.restype = ctypes.c_int
        self.trims = 0
        self.given_back = 0  # bytes this process's resident set fell by across trims
        self.holds = 0
        self.held_s = 0.0  # finished holds
        self.held_since: float | None = None
        self.short = False  # the trim threshold is glibc's own, until calm
        self.calm_since: float | None = None
        self.mark = watch.trim_at  # the working set that earns the next trim

    def step(self, now: float) -> float:
        """Read the working set, act on it; the seconds until the next reading."""
        found = self.reader.read(self.watch.trim_at)
        if found is None:  # blind: glibc's own trim threshold, kept again once calm
            self._shorten()
            self.calm_since = None
            return SLOW_S
        watch = self.watch
        if found >= watch.trim_at:
            self.calm_since = None
            self._shorten()
            if found >= watch.hold_at and self.held_since is None:
                self._hold(now)
            if found >= self.mark:
                self._give_back()
                share = HELD_STEP if self.held_since is not None else STEP
                self.mark = max(watch.trim_at, (self.reader.read() or found)) + int(
                    watch.limit * share
                )
        else:
            self.mark = watch.trim_at
            if self.short or self.held_since is not None:
                if self.calm_since is None:
                    self.calm_since = now
                if now - self.calm_since >= CALM_S:
                    self._loosen(now)
        room = watch.hold_at - found
        return FAST_S if room <= 0 else min(SLOW_S, max(FAST_S, room / RATE))

    def _shorten(self) -> None:
        if not self.short:
            self.short = bool(self._mallopt(M_TRIM_THRESHOLD, LOOSE_TRIM))

    def _hold(self, now: float) -> None:
        if self._mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD):
            self.held_since = now
            self.holds += 1

    def keep(self) -> bool:
        """Set glibc to keep freed memory for reuse (mmap threshold first: either call ends
        glibc's own adjustment); whether glibc took both. Not while the working set cannot
        be read: what is kept is given back only on a reading."""
        if self.reader.read() is None:
            return False
        return bool(self._mallopt(M_MMAP_THRESHOLD, KEEP_MMAP)) and bool(
            self._mallopt(M_TRIM_THRESHOLD, self.watch.keep)
        )

    def _loosen(self, now: float) -> None:
        self.keep()
        if self.held_since is not None:
            self.held_s += now - self.held_since
        self.held_since = self.calm_since = None
        self.short = False

    def _give_back(self) -> None:
        before = resident()
        self._trim(0)
        after = resident()
        self.trims += 1
        if before is not None and after is not None and after < before:
            self.given_back += before - after

    def run(self) -> None:
        """The thread's loop, for the process's life."""
        while True:
            try:
                pause = self.step(time.monotonic())
            except Exception:  # a guest never ends the job: it stops watching
                return
            time.sleep(pause)

    def stats(self) -> dict[str, Any]:
        """What the governor did so far, for the record and the line."""
        held = self.held_s
        if self.held_since is not None:
            held += time.monotonic() - self.held_since
        return {
            "mechanism": "freed memory kept while plentiful (mallopt); malloc_trim and "
            "mallopt(M_MMAP_THRESHOLD) when the working set is short",
            "working_set_source": self.reader.source,
            "kept_mib": self.watch.keep >> 20,
            "trim_at_mib": self.watch.trim_at >> 20,
            "hold_at_mib": self.watch.hold_at >> 20,
            "trims": self.trims,
            "given_back_mib": round(self.given_back / (1 << 20), 1),
            "holds": self.holds,
            "held_seconds": round(held, 1),
            "held_now": self.held_since is not None,
        }


def acted(stats: dict[str, Any]) -> str:
    """What a governor's ``stats`` say it did, in words."""
    if not stats.get("trims") and not stats.get("holds"):
        return (f"nothing to do: the working set stayed under {stats.get('trim_at_mib')} MiB, "
                f"freed memory kept for reuse (up to {stats.get('kept_mib')} MiB free at a "
                "heap's top)")  # fmt: skip
    held = (f"; large blocks unmapped when freed {stats['holds']} time(s), "
            f"{stats['held_seconds']:g} s in all" if stats.get("holds") else "")  # fmt: skip
    return (f"{stats['trims']} trim(s) from {stats['trim_at_mib']} MiB gave back "
            f"{stats['given_back_mib']:g} MiB{held}")  # fmt: skip


_governor: Governor | None = None


def current() -> Governor | None:
    """This process's governor, if one runs."""
    return _governor


def start(watch: Watch) -> str | None:
    """Start this process's governor, once; how the log names it (None: already running)."""
    if _governor is not None:
        return None
    try:
        governor = Governor(watch, cgroup_root(os.environ))
    except (OSError, AttributeError):
        return "malloc_trim not found: malloc left alone"
    kept = governor.keep()
    _run(governor)
    said = "" if kept else " (freed memory not kept: the working set unread, or glibc refused)"
    return f"memory governor started, reading {governor.reader.source}{said}"


def _run(governor: Governor) -> None:
    global _governor
    _governor = governor
    threading.Thread(target=governor.run, name="tfboot-memory", daemon=True).start()


def _after_fork_in_child() -> None:
    """A forked child's heap is counted too: it gets a governor of its own, with the same
    levels (the held threshold, if any, is inherited with the heap)."""
    global _governor
    parent, _governor = _governor, None
    if parent is not None:
        with contextlib.suppress(Exception):  # a guest never fails a fork
            child = Governor(parent.watch, parent=parent)
            child.short = parent.short
            if parent.held_since is not None:
                child.held_since, child.holds = time.monotonic(), 1
            _run(child)


os.register_at_fork(after_in_child=_after_fork_in_child)
