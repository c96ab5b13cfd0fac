"""The host-memory governor (``executor.governor``): what it reads, when it acts, what it says.

The working set and the limit come from a fake cgroup v2 tree copied from
``testdata/cgroup/usage-v2`` (a 600 MiB limit), whose ``memory.current``, ``memory.stat`` and
``memory.max`` each test rewrites in place as a job's working set moves and a resize moves
the limit: a fake, as this machine's cgroup v2 hierarchy has no memory controller (cgroup v1
limits rewritten live, by ``docker update``, are ``tests/docker/test_container_kept_memory.py``).
The calls into glibc (``malloc_trim``, ``mallopt``, ``mallinfo2``) are the real ones, in this
process. The governor in real processes with real frameworks, forks and DataLoader workers
is ``tests/test_allocator.py``; in real containers, ``tests/docker/test_container_host_memory.py``.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tfboot.budget.hostpolicy import CALM_S, FAST_S, HOLD_AT, RATE, SLOW_S, STEP, Levels
from tfboot.budget.malloc import Watch
from tfboot.executor.governor import Governor, acted
from tfboot.node.livelimits import LimitFiles
from tfboot.node.workingset import ProcessTree, WorkingSet, reader, working_set_now
from tfboot.usage.sinks import used_line

TREES = Path(__file__).parent / "testdata" / "cgroup"
MIB = 1 << 20
LIMIT = 600 * MIB
INACTIVE = 50 * MIB  # usage-v2's memory.stat inactive_file


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    shutil.copytree(TREES / "usage-v2", root)
    return root


def working(tree: Path, mib: float, cache: float = 0, shm: float = 0, mapped: float = 0) -> None:
    """Make the fake cgroup's working set ``mib`` MiB (usage minus inactive file), of which
    ``cache`` MiB active page cache (``mapped`` of it mapped by processes) and ``shm`` MiB
    shared memory."""
    (tree / "sys/fs/cgroup/memory.current").write_text(f"{int(mib * MIB) + INACTIVE}\n")
    (tree / "sys/fs/cgroup/memory.stat").write_text(
        f"anon {int((mib - cache) * MIB)}\nactive_file {int(cache * MIB)}\n"
        f"inactive_file {INACTIVE}\nfile_mapped {int(mapped * MIB)}\nshmem {int(shm * MIB)}\n"
        "shmem_thp 0\n"
    )


def resize(tree: Path, mib: int | str, name: str = "memory.max") -> None:
    """Rewrite the fake cgroup's limit in place, as a resize does."""
    (tree / "sys/fs/cgroup" / name).write_text(f"{mib if isinstance(mib, str) else mib * MIB}\n")


def governor(tree: Path) -> Governor:
    watch = Watch(Levels.of(LIMIT), "/sys/fs/cgroup/memory.max")
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
    resize(tree, 64 << 10)
    assert found.step(0.1) == SLOW_S  # far from the levels: the slowest pace
    resize(tree, 600)
    found.step(0.2)
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
    assert "freed memory kept for reuse (up to 24 MiB free)" in acted(governor(tree).stats())


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


def test_a_resize_moves_every_level_at_the_next_reading(tree: Path) -> None:
    found = governor(tree)
    working(tree, 250)  # 42% of 600 MiB: nothing to do
    found.step(0.0)
    assert (found.trims, found.holds) == (0, 0)
    resize(tree, 300)  # in-place resize (NotRequired), or docker update: 83% of the new limit
    found.step(0.1)
    stats = found.stats()
    assert stats["limit_mib"] == 300 and stats["trim_at_mib"] == 195 and stats["kept_mib"] == 12
    assert found.trims == 1 and found.holds == 1  # heap fills the new limit: trimmed and held
    assert [w["limit_mib"] for w in stats["limits_watched"]] == [600, 300]
    assert stats["limits_watched"][1]["source"] == "/sys/fs/cgroup/memory.max"
    resize(tree, 2048)  # and up: the levels follow
    working(tree, 100)
    found.step(0.2)
    assert found.stats()["trim_at_mib"] == int(2048 * 0.65)
    assert "the limit moved: 600 MiB -> 300 MiB -> 2048 MiB" in acted(found.stats())
    resize(tree, "max")  # no limit at all: nothing trimmed, nothing held
    found.step(0.3)
    assert found.stats()["limit_mib"] is None and found.stats()["trim_at_mib"] is None


def test_memory_high_under_memory_max_is_the_limit_in_force(tree: Path) -> None:
    resize(tree, "max", "memory.high")  # every v2 cgroup but the root has one
    found = governor(tree)
    resize(tree, 400, "memory.high")
    working(tree, 280)  # 70% of 400 MiB, 47% of 600
    found.step(0.0)
    assert found.stats()["limit_mib"] == 400 and found.trims == 1
    assert found.stats()["limits_watched"][-1]["source"] == "/sys/fs/cgroup/memory.high"


def test_a_parents_limit_is_followed_with_its_working_set(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(TREES / "v2-memory-parent", root)
    pod = root / "sys/fs/cgroup/kubepods/burstable/pod1"
    for directory in (pod, pod / "ctr"):
        (directory / "memory.current").write_text(f"{100 * MIB}\n")
        (directory / "memory.stat").write_text("inactive_file 0\n")
    assert LimitFiles(str(root)).read() == (
        1 << 30,
        "/sys/fs/cgroup/kubepods/burstable/pod1/memory.max",
    )
    (pod / "ctr/memory.max").write_text(f"{512 * MIB}\n")  # the container's own, now tighter
    found = Governor(Watch(Levels.of(1 << 30), "/sys/fs/cgroup/kubepods/burstable/pod1/memory.max"),
                     str(root))  # fmt: skip
    (pod / "ctr/memory.current").write_text(f"{400 * MIB}\n")  # 78% of 512: its own cgroup read
    found.step(0.0)
    assert found.stats()["limit_mib"] == 512 and found.holds == 1
    assert found.stats()["working_set_source"].startswith(str(pod / "ctr"))


def test_page_cache_is_pressure_the_kernel_relieves_itself(tree: Path) -> None:
    found = governor(tree)
    working(tree, 500, cache=400)  # 83% of the limit, 400 MiB of it a dataset read every epoch
    found.step(0.0)
    assert (found.trims, found.holds) == (0, 0)  # nothing a trim could give back
    working(tree, 500, cache=400, mapped=350)  # a framework's libraries, mapped: in use
    found.step(1.0)
    assert found.holds == 1  # heap and mapped files 450 MiB, 75%: only 50 MiB is cache


def test_shared_memory_never_starts_a_hold_and_is_said(tree: Path) -> None:
    found = governor(tree)
    working(tree, 400, shm=300)  # the files written: 67%, a trim as it crosses 65%
    found.step(0.0)
    assert found.trims == 1 and found.holds == 0
    working(tree, 510, shm=420)  # 85%, /dev/shm's files most of it
    found.step(0.05)
    stats = found.stats()
    assert found.holds == 0 and stats["holds_declined"] == 1
    assert stats["filled"]["by"] == "/dev/shm" and stats["filled"]["shm_mib"] == 420
    assert stats["filled"]["shm"].startswith("/dev/shm ")  # its size, and where it comes from
    said = acted(stats)
    assert "/dev/shm filled the limit (420 MiB of a working set of 510 MiB; /dev/shm " in said
    assert "no hold taken 1 time(s): trimming the heap cannot give it back" in said
    line = used_line({"host_memory": {"peak_mib": 512, "limit_mib": 600, "release": stats}})
    assert "/dev/shm filled the limit (420 MiB) (/dev/shm " in line
    assert "no hold: a trim cannot give it back" in line
    found.step(0.1)
    assert found.stats()["holds_declined"] == 1  # said once a crossing
    working(tree, 510, shm=20)  # heap memory fills it now: held
    found.step(0.2)
    assert found.holds == 1 and found.stats()["filled"]["action"] == "hold"


def test_what_glibc_keeps_below_a_live_block_is_bounded(tree: Path) -> None:
    """Free blocks below a live one: no trim threshold returns them, a reading bounds them."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
    libc.free.argtypes = (ctypes.c_void_p,)
    found = governor(tree)  # keeps at most 24 MiB (4% of 600)
    assert found.keep()
    working(tree, 100)
    found.step(0.0)
    blocks = [libc.malloc(1 << 20) for _ in range(64)]
    for block in blocks:
        ctypes.memset(block, 1, 1 << 20)
    for block in blocks[:-1]:
        libc.free(block)  # 63 MiB free below the last, live block
    assert (found.glibc.free() or 0) >= 60 * MIB
    found.step(100.0)
    assert found.stats()["bounding_trims"] >= 1 and found.trims == 0
    assert found.stats()["free_in_heaps_most_mib"] >= 60
    found.step(100.5)  # within a second: not counted again
    bounds = found.bounds
    found.step(102.0)  # counted again: what the trim gave back is not kept, no trim
    assert found.bounds == bounds
    libc.free(blocks[-1])


def test_a_figure_watches_this_process_and_its_children() -> None:
    tree = ProcessTree()
    alone = tree.read() or 0
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; b = bytearray(200 << 20); sys.stdin.read()"],
        stdin=subprocess.PIPE,
    )  # fmt: skip
    try:
        for _ in range(100):  # until the child has touched its 200 MiB
            with open(f"/proc/{child.pid}/statm") as statm:
                if int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") > 200 * MIB:
                    break
            subprocess.run(["sleep", "0.05"], check=True)
        tree = ProcessTree()  # listed afresh
        found = tree.split()
        assert found is not None and found.working >= alone + 200 * MIB
        assert found.heap >= 200 * MIB  # anonymous: a heap's
    finally:
        child.communicate(b"")
    assert reader("/", "").source.startswith("the resident sets of this process and its")


def test_the_limits_watched_are_kept_within_bounds(tree: Path) -> None:
    found = governor(tree)
    working(tree, 100)
    for n in range(100):  # a limit that flaps (memory.high rewritten by a controller)
        resize(tree, 600 + n)
        found.step(float(n))
    watched = found.stats()["limits_watched"]
    assert len(watched) == 32 and watched[0]["limit_mib"] == 600 and watched[-1]["limit_mib"] == 699
    resize(tree, "max")
    found.step(200.0)
    assert acted(found.stats()).endswith("-> 699 MiB -> no limit)")
