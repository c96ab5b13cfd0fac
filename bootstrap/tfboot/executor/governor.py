"""The host-memory governor: freed memory kept while it is plentiful, given back when it is short.

One daemon thread per process (``tfboot-memory``) reads the limit in force
(``node.livelimits``) and the working set (``node.workingset``) against the levels of
``budget.hostpolicy.Levels``, which decides when to act and how much (this module is the
mechanism: the thread, its readings, glibc's calls), and acts through glibc, by ``ctypes``:

- as it starts, glibc's thresholds are set to keep freed memory for reuse (``keep``: the
  mmap threshold where glibc's own adjustment ends, the trim threshold ``levels.keep``,
  which glibc applies in ``free`` with no thread);
- at each reading the limit is read again: a resize moves every level at once, and what
  glibc keeps over the new bound is given back then;
- below ``trim_at`` it does nothing but read, at intervals paced by the distance to
  ``hold_at`` (the working set could not cross it between two readings even growing at
  ``RATE``), from ``FAST_S`` to ``SLOW_S``; at most every ``KEPT_EVERY_S`` it counts what glibc
  holds free (``mallinfo2``: blocks below a live one, which no trim threshold returns) and
  trims once that passes ``levels.keep``;
- from ``trim_at`` (of the working set less page cache, which the kernel reclaims itself),
  the trim threshold goes back to glibc's own, and ``malloc_trim(0)`` runs each time the
  working set has grown by ``STEP`` of the limit since the last trim (a process that lives
  there pays one trim, not one per block);
- from ``hold_at``, where heap memory fills the limit (not ``/dev/shm`` or other shared
  memory, which no trim gives back), ``mallopt(M_MMAP_THRESHOLD, 1 MiB)`` as well, so freed
  large blocks are unmapped at once, and trims follow the working set at a finer step; after
  ``CALM_S`` under ``trim_at`` memory is kept again;
- while the working set cannot be read, glibc's own trim threshold, as when short: nothing
  is kept that only a reading would give back.

What it did is counted (``stats``) for the info line, ``tfboot doctor`` and the usage report:
the limits it watched and since when, what glibc held free, the trims (those of a short
working set and those that bounded what was kept), the bytes this process's resident set
fell by across them, the holds and how long they lasted, and what filled the limit when it
acted. A forked child (a DataLoader worker, a ``multiprocessing`` child) starts its own
governor: the cgroup counts its heap too; a fresh interpreter that imports a framework gets
one from tfboot's hook. The thread holds no lock a fork could copy taken (its state is plain
numbers; glibc serialises ``malloc_trim`` and ``mallinfo2`` with ``fork`` itself), and
``ctypes`` lets go of the interpreter lock during each call.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ..budget.hostpolicy import (
    CALM_S,
    KEEP,
    KEEP_MMAP,
    KEPT_EVERY_S,
    MMAP_THRESHOLD,
    SLOW_S,
    Levels,
)
from ..budget.malloc import Watch
from ..node.cpu import cgroup_root
from ..node.livelimits import LimitFiles
from ..node.shm import read_shm
from ..node.workingset import PAGE, Reading, reader, resident

M_TRIM_THRESHOLD = -1  # malloc.h
M_MMAP_THRESHOLD = -3  # malloc.h
WATCHED = 32  # the limits the record keeps: the first and the latest
MIB = 1 << 20
STAMP = "%Y-%m-%dT%H:%M:%SZ"
# What may fill the limit that no trim of this process's heap gives back, and its record's key.
FILLERS = {"page cache": "page_cache_mib", "/dev/shm": "shm_mib",
           "other processes": "other_processes_mib"}  # fmt: skip


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]  # fmt: skip


class Glibc:
    """glibc's functions the governor calls: ``malloc_trim``, ``mallopt``, ``mallinfo2``
    (None before glibc 2.33). Raises ``OSError`` or ``AttributeError`` without them."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None)
        self.trim, self.mallopt = libc.malloc_trim, libc.mallopt
        self.trim.argtypes, self.trim.restype = (ctypes.c_size_t,), ctypes.c_int
        self.mallopt.argtypes, self.mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
        self._info = getattr(libc, "mallinfo2", None)
        if self._info is not None:
            self._info.argtypes, self._info.restype = (), _MallInfo2

    def free(self) -> int | None:
        """The bytes glibc holds free in its heaps (``mallinfo2``'s ``fordblks``; mapped
        blocks are not counted: they go back when freed); None where it cannot say."""
        return None if self._info is None else int(self._info().fordblks)


def stamp() -> str:
    """Now, as the record writes a moment (UTC)."""
    return time.strftime(STAMP, time.gmtime())


class Governor:
    """One process's governor: its levels, its readers, what it did."""

    def __init__(self, watch: Watch, root: str = "/", parent: Governor | None = None) -> None:
        """A governor reading ``root``'s cgroup files; a forked child's takes its ``parent``'s
        readers, levels and glibc's functions as they are (open files, resolved symbols: the
        child opens and loads nothing, so no lock a fork copied taken is ever waited on)."""
        self.watch, self.root = watch, root
        if parent is not None:
            self.limits, self.reader, self.glibc = parent.limits, parent.reader, parent.glibc
            self.levels, self.limit_file = parent.levels, parent.limit_file
        else:
            self.limits = LimitFiles(root) if watch.follows else None
            self.reader = reader(root, watch.limit_file)
            self.glibc = Glibc()
            self.levels, self.limit_file = watch.levels, watch.limit_file
        self.watched: list[dict[str, Any]] = [
            {"limit_mib": self.levels.limit >> 20, "source": self.limit_file or None,
             "since": stamp()}]  # fmt: skip
        self.trims = 0  # of a short working set
        self.bounds = 0  # of what glibc kept past the bound
        self.given_back = 0  # bytes this process's resident set fell by across trims
        self.holds = 0
        self.declined = 0  # holds not taken: page cache or shared memory filled the limit
        self.declining = False  # one is not taken now, until the working set falls under
        self.held_s = 0.0  # finished holds
        self.held_since: float | None = None
        self.short = False  # the trim threshold is glibc's own, until calm
        self.calm_since: float | None = None
        self.mark = self.levels.trim_at  # the working set that earns the next trim
        self.kept_mark = self.levels.keep  # what glibc holds free that earns a bounding trim
        self.counted_at = -KEPT_EVERY_S
        self.trimmed_at = 0.0
        self.kept_now: int | None = None
        self.kept_most = 0
        self.filled: dict[str, Any] | None = None  # what filled the limit when it last acted
        # Other readings of the cgroup while the job runs, made by this thread after each of
        # its own (``executor.follow``: the CPU quota); each paces itself.
        self.also: list[Callable[[float], None]] = []

    def step(self, now: float) -> float:
        """Read the limit and the working set, act on them; the seconds until the next
        reading."""
        self._follow(now)
        levels = self.levels
        found = self.reader.split(levels.trim_at)
        if found is None:  # blind: glibc's own trim threshold, kept again once calm
            self._shorten()
            self.calm_since = None
            return SLOW_S
        self._bound(now)
        pressure = found.pressure
        if pressure >= levels.trim_at:
            self.calm_since = None
            self._shorten()
            hold = levels.hold(pressure, found.heap)
            if hold is not None and self.held_since is None:
                if hold:
                    self._hold(now, found)
                elif not self.declining:  # said once a crossing
                    self.declined, self.declining = self.declined + 1, True
                    self._note(found, "no hold")
            if pressure >= self.mark:
                self._give_back(now)
                self._note(found, "trim")
                again = self.reader.split()
                self.mark = levels.next_trim(again.pressure if again else pressure,
                                             self.held_since is not None)  # fmt: skip
        else:
            self.mark = levels.trim_at
            if self.short or self.held_since is not None:
                if self.calm_since is None:
                    self.calm_since = now
                if now - self.calm_since >= CALM_S:
                    self._loosen(now)
        if pressure < levels.hold_at:
            self.declining = False
        return levels.pause(pressure)

    def _follow(self, now: float) -> None:
        """The limit in force: a change moves every level and bounds what is kept at once."""
        if self.limits is None:
            return
        found = self.limits.read()
        if found is None or (found[0] or 0) == self.levels.limit:
            return
        limit, source = found
        self.levels = Levels.of(limit)
        if len(self.watched) >= WATCHED:  # the first limit and the latest ones are kept
            del self.watched[1]
        self.watched.append({"limit_mib": (limit or 0) >> 20 or None, "source": source or None,
                             "since": stamp()})  # fmt: skip
        if source and os.path.dirname(source) != os.path.dirname(self.limit_file):
            self.reader.close()  # a parent's limit is now the tightest: its working set
            self.reader, self.limit_file = reader(self.root, source), source
        self.mark, self.kept_mark = self.levels.trim_at, self.levels.keep
        if not self.short:
            self.glibc.mallopt(M_TRIM_THRESHOLD, self.levels.keep)
        self._bound(now, force=True)

    def _bound(self, now: float, force: bool = False) -> None:
        """What glibc holds free, counted; trimmed where past the bound (``levels.keep``)."""
        if not force and now - self.counted_at < KEPT_EVERY_S:
            return
        self.counted_at = now
        kept = self.kept_now = self.glibc.free()
        if kept is None:
            return
        self.kept_most = max(self.kept_most, kept)
        levels = self.levels
        if kept <= levels.keep:
            self.kept_mark = levels.keep
        elif levels.bounding(kept, self.kept_mark, now - self.trimmed_at):
            self._give_back(now, bounding=True)
            self.kept_mark = levels.rebound(self.glibc.free() or 0)

    def _shorten(self) -> None:
        if not self.short:
            self.short = bool(self.glibc.mallopt(M_TRIM_THRESHOLD, self.levels.short_trim))

    def _hold(self, now: float, found: Reading) -> None:
        if self.glibc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD):
            self.held_since = now
            self.holds += 1
            self._note(found, "hold")

    def keep(self) -> bool:
        """Set glibc to keep freed memory for reuse (mmap threshold first: either call ends
        glibc's own adjustment); whether glibc took both. Not while the working set cannot
        be read: what is kept is given back only on a reading."""
        if self.reader.read() is None:
            return False
        return bool(self.glibc.mallopt(M_MMAP_THRESHOLD, KEEP_MMAP)) and bool(
            self.glibc.mallopt(M_TRIM_THRESHOLD, self.levels.keep)
        )

    def _loosen(self, now: float) -> None:
        self.keep()
        if self.held_since is not None:
            self.held_s += now - self.held_since
        self.held_since = self.calm_since = None
        self.short = False

    def _give_back(self, now: float, bounding: bool = False) -> None:
        before = resident()
        self.glibc.trim(0)
        after = resident()
        if bounding:
            self.bounds += 1
        else:
            self.trims += 1
        self.trimmed_at = now
        if before is not None and after is not None and after < before:
            self.given_back += before - after

    def _note(self, found: Reading, action: str) -> None:
        """What filled the limit as the governor acted: this process's heap (its anonymous
        resident pages), other processes' memory, page cache and shared memory."""
        own = _anonymous()
        heap = found.heap if own is None else min(found.heap, own)
        parts = {"heap": heap, "other processes": found.heap - heap,
                 "page cache": found.cache, "/dev/shm": found.shm}  # fmt: skip
        by = max(parts, key=lambda k: parts[k])
        self.filled = {
            "action": action,
            "at": stamp(),
            "working_set_mib": found.working >> 20,
            "heap_mib": heap >> 20,
            "other_processes_mib": (found.heap - heap) >> 20,
            "page_cache_mib": found.cache >> 20,
            "shm_mib": found.shm >> 20,
            "by": by,
            "shm": read_shm().describe() if by == "/dev/shm" else None,
        }

    def run(self) -> None:
        """The thread's loop, for the process's life."""
        while True:
            try:
                now = time.monotonic()
                pause = self.step(now)
                for reading in self.also:
                    reading(now)
            except Exception:  # a guest never ends the job: it stops watching
                return
            time.sleep(pause)

    def stats(self) -> dict[str, Any]:
        """What the governor did so far, for the record and the line."""
        held = self.held_s
        if self.held_since is not None:
            held += time.monotonic() - self.held_since
        levels = self.levels
        return {
            "mechanism": "freed memory kept while plentiful (mallopt), at most "
            f"{KEEP:.0%} of the limit; malloc_trim and mallopt(M_MMAP_THRESHOLD) when the "
            "working set is short",
            "working_set_source": self.reader.source,
            "limit_mib": levels.limit >> 20 or None,
            "limits_watched": list(self.watched),
            "kept_mib": levels.keep >> 20,
            "free_in_heaps_mib": None if self.kept_now is None else self.kept_now >> 20,
            "free_in_heaps_most_mib": self.kept_most >> 20,
            "trim_at_mib": levels.trim_at >> 20 if levels.limit else None,
            "hold_at_mib": levels.hold_at >> 20 if levels.limit else None,
            "trims": self.trims,
            "bounding_trims": self.bounds,
            "given_back_mib": round(self.given_back / MIB, 1),
            "holds": self.holds,
            "holds_declined": self.declined,
            "held_seconds": round(held, 1),
            "held_now": self.held_since is not None,
            "filled": self.filled,
        }


def _anonymous() -> int | None:
    """This process's anonymous resident pages (``statm``: resident less shared), in bytes."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            fields = statm.read(256).split()
        return (int(fields[1]) - int(fields[2])) * PAGE
    except (OSError, ValueError, IndexError):
        return None


def acted(stats: dict[str, Any]) -> str:
    """What a governor's ``stats`` say it did, in words."""
    watched = stats.get("limits_watched") or []
    moved = ""
    if len(watched) > 1:
        moved = (" (the limit moved: " + " -> ".join(
            f"{w['limit_mib']} MiB" if w.get("limit_mib") else "no limit" for w in watched)
            + ")")  # fmt: skip
    bounded = (f"; {stats['bounding_trims']} trim(s) held what glibc kept to "
               f"{stats.get('kept_mib')} MiB" if stats.get("bounding_trims") else "")  # fmt: skip
    filled = stats.get("filled") or {}
    fill = ""
    if filled.get("by") in FILLERS:
        what = filled["by"]
        fill = (f"; {what} filled the limit ({filled.get(FILLERS[what])} MiB of a working set of "
                f"{filled.get('working_set_mib')} MiB"
                + (f"; {filled['shm']}" if filled.get("shm") else "") + ")")  # fmt: skip
        if stats.get("holds_declined"):
            fill += (f", no hold taken {stats['holds_declined']} time(s): trimming the heap "
                     "cannot give it back")  # fmt: skip
    if stats.get("free_in_heaps_mib") is not None:
        bounded += f"; glibc holds {stats['free_in_heaps_mib']} MiB free now"
    if not stats.get("trims") and not stats.get("holds"):
        under = (f"the working set stayed under {stats['trim_at_mib']} MiB"
                 if stats.get("trim_at_mib") else "no limit in force now")  # fmt: skip
        return (f"nothing to do: {under}, "
                f"freed memory kept for reuse (up to {stats.get('kept_mib')} MiB free)"
                f"{bounded}{fill}{moved}")  # fmt: skip
    held = (f"; large blocks unmapped when freed {stats['holds']} time(s), "
            f"{stats['held_seconds']:g} s in all" if stats.get("holds") else "")  # fmt: skip
    return (f"{stats['trims']} trim(s) from {stats['trim_at_mib']} MiB gave back "
            f"{stats['given_back_mib']:g} MiB{held}{bounded}{fill}{moved}")  # fmt: skip


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
