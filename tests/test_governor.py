"""The host-memory governor (``executor.governor``): what it reads, when it acts, what it says.

The working set comes from a fake cgroup tree copied from ``testdata/cgroup/usage-v2`` (a
600 MiB limit), whose ``memory.current`` each test rewrites in place as a job's working
set moves; the calls into glibc (``malloc_trim``, ``mallopt``) are the real ones, in this
process. The governor in real processes with real frameworks, forks and DataLoader workers
is ``tests/test_allocator.py``; in real containers, ``tests/docker/test_container_host_memory.py``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tfboot.budget.malloc import CALM_S, HOLD_AT, TRIM_AT, Watch
from tfboot.executor.governor import FAST_S, RATE, SLOW_S, STEP, Governor, acted
from tfboot.node.workingset import WorkingSet, reader, working_set_now

TREES = Path(__file__).parent / "testdata" / "cgroup"
MIB = 1 << 20
LIMIT = 600 * MIB
INACTIVE = 50 * MIB  # usage-v2's memory.stat inactive_file


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    shutil.copytree(TREES / "usage-v2", root)
    return root


def working(tree: Path, mib: float) -> None:
    """Make the fake cgroup's working set ``mib`` MiB (usage minus inactive file)."""
    (tree / "sys/fs/cgroup/memory.current").write_text(f"{int(mib * MIB) + INACTIVE}\n")


def governor(tree: Path) -> Governor:
    watch = Watch(LIMIT, int(LIMIT * TRIM_AT), int(LIMIT * HOLD_AT), "/sys/fs/cgroup/memory.max")
    return Governor(watch, str(tree))


def test_the_working_set_is_usage_minus_inactive_file(tree: Path) -> None:
    assert working_set_now(str(TREES / "usage-v2"), "/sys/fs/cgroup/memory.max") == 150 * MIB
    v1 = "/sys/fs/cgroup/memory/memory.limit_in_bytes"
    assert working_set_now(str(TREES / "usage-v1"), v1) == 70 * MIB  # total_inactive_file
    found = reader(str(tree), "/sys/fs/cgroup/memory.max")
    assert found.source.endswith("memory.current minus memory.stat's inactive_file")
    working(tree, 321)
    assert found.read() == 321 * MIB  # read again, from the same open file


def test_without_a_cgroup_the_process_resident_set_is_read() -> None:
    found = reader("/", "")
    assert "resident set" in found.source
    assert (found.read() or 0) > 4 * MIB


def test_an_unreadable_working_set_is_none_and_never_raises(tmp_path: Path) -> None:
    assert WorkingSet(2, str(tmp_path / "gone")).source.startswith("this process's resident")
    (tmp_path / "memory.current").write_text("garbage\n")
    (tmp_path / "memory.stat").write_text("inactive_file x\n")
    assert WorkingSet(2, str(tmp_path)).read() is None


def test_below_the_levels_it_only_reads_paced_by_the_room(tree: Path) -> None:
    working(tree, 150)
    found = governor(tree)
    pause = found.step(0.0)
    assert (found.trims, found.holds) == (0, 0)
    # below the levels the usage alone is read (the working set plus 50 MiB of inactive
    # file cache here): an upper bound, so the pace errs towards reading sooner
    assert pause == pytest.approx((int(LIMIT * HOLD_AT) - 150 * MIB - INACTIVE) / RATE)
    assert FAST_S < pause < SLOW_S
    found.watch = Watch(64 << 30, 0, 60 << 30, found.watch.limit_file)
    assert found.step(0.1) == SLOW_S  # far from the levels: the slowest pace
    found.watch = governor(tree).watch
    assert "nothing to do: the working set stayed under 390 MiB" in acted(found.stats())


def test_from_trim_at_it_trims_once_per_step_of_growth(tree: Path) -> None:
    found = governor(tree)
    working(tree, 400)  # over 65% of 600 MiB
    found.step(0.0)
    assert (found.trims, found.holds) == (1, 0)
    found.step(0.1)
    assert found.trims == 1  # a process that lives there pays one trim, not one a reading
    working(tree, 400 + STEP * 600 + 1)
    found.step(0.2)
    assert found.trims == 2
    working(tree, 300)  # back under: the next crossing trims at once
    found.step(0.3)
    working(tree, 395)
    found.step(0.4)
    assert found.trims == 3 and found.holds == 0


def test_from_hold_at_large_blocks_are_unmapped_until_it_is_calm(tree: Path) -> None:
    found = governor(tree)
    working(tree, 460)  # over 75%
    assert found.step(0.0) == FAST_S
    assert found.holds == 1 and found.stats()["held_now"]
    working(tree, 100)
    found.step(1.0)
    assert found.stats()["held_now"]  # not calm yet
    found.step(1.0 + CALM_S)
    stats = found.stats()
    assert not stats["held_now"] and stats["held_seconds"] == pytest.approx(1.0 + CALM_S)
    assert "large blocks unmapped when freed 1 time(s)" in acted(stats)
    working(tree, 500)
    found.step(100.0)
    assert found.holds == 2


def test_memory_is_kept_until_short_and_again_once_calm(tree: Path) -> None:
    found = governor(tree)
    assert found.keep()  # glibc takes both thresholds
    working(tree, 150)
    found.step(0.0)
    assert not found.short
    working(tree, 400)  # past 65%: glibc's own trim threshold, and a trim
    found.step(1.0)
    assert found.short and found.trims == 1 and found.holds == 0
    working(tree, 100)
    found.step(2.0)
    assert found.short  # not calm yet
    found.step(2.0 + CALM_S)
    assert not found.short and found.holds == 0
    assert "freed memory kept for reuse (up to 120 MiB" in acted(governor(tree).stats())


def test_a_cgroup_that_cannot_be_read_is_waited_on_with_glibcs_own_threshold(tree: Path) -> None:
    found = governor(tree)
    assert found.keep()
    (tree / "sys/fs/cgroup/memory.current").write_text("not a number\n")
    assert found.step(0.0) == SLOW_S and found.trims == 0
    assert found.short  # blind: nothing kept that only a reading would give back
    assert not governor(tree).keep()  # nor kept from the start
    working(tree, 100)
    found.step(1.0)
    found.step(1.0 + CALM_S)
    assert not found.short  # read again, and calm: kept again
