"""The one policy of host memory under a limit: tf.data's level, the pinned share, the levels
at which freed memory is kept or given back, the governor's paces, and the decisions on
them. Pure: ``executor.governor`` and ``executor.tfdata`` read the working set and act;
``tests/test_host_policy.py`` asserts the order the design relies on.

tf.data's RAM budget is measured, not a fixed share (``ram_budget``): the room between the
working set and ``LIVE_AT`` of the limit, divided by ``TRANSIENT``. The autotuner bounds only
the bytes its buffers hold; the elements being made, the batches being assembled and what
the allocator keeps of them come on top, measured at two to three times the budget (24 MiB
elements under a 175 MiB budget added 373 MiB to the working set, docs/host-memory.md). So
the pipeline's whole share stays near ``LIVE_AT`` of the limit, below the governor's levels.
Never less than ``FLOOR_SHARE`` of the limit: a pipeline always runs. The GPU's pinned host
memory takes ``PINNED_SHARE`` of the limit.

A budget that bounds what a framework keeps (tf.data's RAM budget, a model's tensors)
bounds nothing the kernel sees while glibc's ``malloc`` keeps what the framework frees
(``node.allocator``). Fixing glibc's mmap threshold low returns it, but at a price paid on
every large block for the whole run (a fresh mapping, page-faulted and zeroed by the
kernel): 1.3 to 2.5 times the CPU of ordinary NumPy, PyTorch and Keras work. glibc's own
default pays part of that price too: the top of its heap is trimmed as soon as more than
twice its mmap threshold (at most 64 MiB) lies free there, so a step that frees more than
that faults it all in again on the next, a lottery on where blocks land (PyTorch's MLP
step: 50,000 to 830,000 faults in 30 steps from one run to the next, tfboot off). So, as Go's
runtime keeps freed spans until its scavenger returns them against ``GOMEMLIMIT``:

- while memory is plentiful, glibc's mmap threshold is set where its own adjustment ends
  (``KEEP_MMAP``, 32 MiB: larger blocks are mapped and unmapped as glibc's default does)
  and its trim threshold to ``KEEP`` of the limit: freed memory stays for the next step
  instead of being faulted in again. ``KEEP`` is under the 5% of the limit a job that lives
  without tfboot has to spare, and glibc applies it in ``free`` itself: what is kept at a
  heap's top never needs a thread to come back, so a burst inside one call that holds the
  interpreter lock (``json.loads``, ``bytes * n``), when the governor cannot run, finds no
  more kept than that. What the top cannot give back (free blocks below a live one) is
  counted (``mallinfo2``) at the governor's readings and trimmed once past ``KEEP``
  (``Levels.bounding``);
- the levels follow the limit in force (``Levels.of``): a resize moves them all at the
  next reading, and what is kept over the new ``KEEP`` is given back then;
- from ``TRIM_AT`` of the limit, the trim threshold goes back to glibc's own
  (``LOOSE_TRIM``, or ``KEEP`` where lower: ``Levels.short_trim``), and ``malloc_trim(0)``
  gives the free pages of every arena back, paced so that a process that lives there does
  not pay it on every block (``Levels.next_trim``);
- from ``HOLD_AT``, glibc's mmap threshold is fixed at ``MMAP_THRESHOLD`` as well (freed
  large blocks unmapped at once), and trims follow the working set closely; once the
  working set has stayed under ``TRIM_AT`` for ``CALM_S``, memory is kept again. Only where a
  heap fills the limit (``Levels.hold``): page cache (the kernel reclaims it itself) and
  shared memory (``/dev/shm``: only deleting its files frees it) are read apart
  (``node.workingset``) and never start a hold, as no trim can give them back.

Readings are paced by the distance to ``HOLD_AT`` (``Levels.pause``).
"""

from __future__ import annotations

from dataclasses import dataclass

# The levels, of the limit, lowest first (tests/test_host_policy.py asserts the order):
LIVE_AT = 0.60  # what tf.data's buffers and transients may fill up to
KEEP = 0.04  # the most freed memory kept, under the 5% a job has to spare
TRIM_AT = 0.65  # free pages trimmed from here
HOLD_AT = 0.75  # the mmap threshold fixed from here
SPARE = 0.05  # what a job that lives without tfboot has to spare: no level reaches into it
# tf.data's RAM budget and the pinned host memory
TRANSIENT = 3  # the working set a pipeline adds, against the bytes its buffers hold
FLOOR_SHARE = 32  # the least RAM budget: a 32nd of the limit
PINNED_SHARE = 4  # TF_GPU_HOST_MEM_LIMIT_IN_MB: a quarter of the limit
# glibc's thresholds, in bytes
KEEP_MAX = 1 << 30  # the most kept, whatever the limit (mallopt takes an int)
MMAP_THRESHOLD = 1 << 20  # 1 MiB while held: docs/host-memory.md measures it
# Where glibc's dynamic adjustment ends on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX, also the
# largest mallopt accepts), and the trim threshold it sets with it (twice the mmap threshold).
KEEP_MMAP = 32 << 20
LOOSE_TRIM = 64 << 20
NONE = 1 << 62  # a level no working set reaches: no limit in force
# The governor's paces: readings paced by the distance to ``HOLD_AT``, the working set
# assumed able to grow at ``RATE`` between two of them.
FAST_S = 0.01  # the shortest interval between two readings
SLOW_S = 1.0  # the longest
RATE = 4 << 30  # bytes a second the working set is assumed able to grow at, for the pacing
STEP = 0.02  # of the limit: growth that earns another trim while not held
HELD_STEP = 0.005  # the same while held
KEPT_EVERY_S = 1.0  # what glibc holds free is counted at most this often
CALM_S = 30.0  # seconds under TRIM_AT before a hold is let go
# What glibc counts free includes pages a trim already gave back, which a later block may
# touch again unseen: while the count stays over the bound, a trim again at most this often.
RETRIM_S = 30.0


def ram_budget(limit_mib: int, working_mib: int | None) -> int:
    """tf.data's RAM budget in MiB under ``limit_mib`` with ``working_mib`` in use now."""
    room = int(limit_mib * LIVE_AT) - (working_mib or 0)
    return max(1, limit_mib // FLOOR_SHARE, room // TRANSIENT)


def pinned_mib(limit_mib: int) -> int:
    """The pinned host memory a GPU may take under ``limit_mib``."""
    return max(1, limit_mib // PINNED_SHARE)


@dataclass(frozen=True)
class Levels:
    """The governor's levels under one limit, in bytes (``limit`` 0: no limit in force)."""

    limit: int
    trim_at: int
    hold_at: int
    keep: int  # glibc's trim threshold while plentiful, and the most kept before a trim

    @classmethod
    def of(cls, limit: int | None) -> Levels:
        """The levels under ``limit`` bytes (None: none, where nothing is kept past glibc's
        own default and nothing is trimmed)."""
        if not limit:
            return cls(0, NONE, NONE, LOOSE_TRIM)
        keep = min(KEEP_MAX, max(1 << 20, int(limit * KEEP)))
        return cls(limit, int(limit * TRIM_AT), int(limit * HOLD_AT), keep)

    @property
    def short_trim(self) -> int:
        """glibc's trim threshold while memory is short: its own, or ``keep`` where lower."""
        return min(LOOSE_TRIM, self.keep)

    def pause(self, pressure: int) -> float:
        """The seconds until the next reading at ``pressure`` bytes: the working set could
        not cross the hold level between two readings, even growing at ``RATE``."""
        room = self.hold_at - pressure
        return FAST_S if room <= 0 else min(SLOW_S, max(FAST_S, room / RATE))

    def next_trim(self, pressure: int, held: bool) -> int:
        """The working set that earns the next trim, after one at ``pressure`` bytes: a
        step of the limit more (a finer one while ``held``), never under the trim level."""
        return max(self.trim_at, pressure) + int(self.limit * (HELD_STEP if held else STEP))

    def hold(self, pressure: int, heap: int) -> bool | None:
        """At ``pressure`` bytes, ``heap`` of them a heap's: whether to hold (heap memory
        fills the limit past the trim level), or not (page cache, shared memory or other
        processes fill it: no trim gives them back); None under the hold level."""
        if pressure < self.hold_at:
            return None
        return heap >= self.trim_at

    def bounding(self, kept: int, mark: int, since_trim_s: float) -> bool:
        """Whether ``kept`` bytes glibc holds free earn a bounding trim: past ``keep``, and
        at ``mark`` (``rebound`` after the last one) or ``RETRIM_S`` after a trim."""
        return kept > self.keep and (kept >= mark or since_trim_s >= RETRIM_S)

    def rebound(self, kept_after: int) -> int:
        """The mark of the next bounding trim, after one that left ``kept_after`` bytes
        counted free: what glibc counts free after a trim is mostly pages it gave back, so
        the next comes once it holds ``keep`` more."""
        return kept_after + self.keep
