"""The one policy of host memory under a limit (``budget.hostpolicy``): the order of its
levels that the design relies on, and its decisions, pure (the governor that acts on them
is ``tests/test_governor.py``; tf.data's budget in a pipeline, ``tests/tfdata/``)."""

from __future__ import annotations

import pytest
from tfboot.budget.hostpolicy import (
    FAST_S,
    FLOOR_SHARE,
    HELD_STEP,
    HOLD_AT,
    KEEP,
    KEEP_MAX,
    KEEP_MMAP,
    KEPT_EVERY_S,
    LIVE_AT,
    LOOSE_TRIM,
    MMAP_THRESHOLD,
    RATE,
    RETRIM_S,
    SLOW_S,
    SPARE,
    STEP,
    TRANSIENT,
    TRIM_AT,
    Levels,
    pinned_mib,
    ram_budget,
)  # fmt: skip

MIB = 1 << 20
LIMIT = 600 * MIB


def test_the_levels_are_ordered() -> None:
    """tf.data's buffers and transients stay under the level where memory is given back, the
    levels under the limit less what a job without tfboot has to spare, and what is kept
    under that spare."""
    assert 0 < LIVE_AT < TRIM_AT < HOLD_AT < 1 - SPARE
    assert 0 < KEEP < SPARE


def test_a_pipeline_at_its_level_with_what_is_kept_gives_nothing_back() -> None:
    """What glibc keeps counts in the working set: a pipeline filling up to tf.data's level
    beside the most kept stays under the trim level, so a job that lives there is never
    trimmed for what tfboot itself keeps."""
    assert LIVE_AT + KEEP < TRIM_AT
    levels = Levels.of(LIMIT)
    assert int(LIMIT * LIVE_AT) + levels.keep < levels.trim_at


def test_glibc_s_thresholds_are_ordered() -> None:
    """Unmapped at once while held (the smallest), mapped past glibc's own adjustment while
    plentiful, and glibc's own trim threshold twice that; what is kept fits mallopt's int."""
    assert MMAP_THRESHOLD < KEEP_MMAP and LOOSE_TRIM == 2 * KEEP_MMAP
    assert KEEP_MAX < 1 << 31


def test_the_paces_are_ordered() -> None:
    """Trims follow the working set closer while held; readings from the fastest pace to the
    slowest; a bounding trim comes again only after what glibc holds free was counted anew."""
    assert 0 < HELD_STEP < STEP
    assert 0 < FAST_S < SLOW_S
    assert KEPT_EVERY_S < RETRIM_S


def test_what_is_kept_is_a_share_of_the_limit_under_five_percent() -> None:
    assert Levels.of(LIMIT).keep == int(LIMIT * KEEP)
    assert Levels.of(16 << 20).keep == 1 << 20  # at least a MiB
    assert Levels.of(64 << 40).keep == KEEP_MAX  # never past what mallopt takes
    assert Levels.of(None).trim_at > 1 << 60  # no limit: nothing is ever short
    assert Levels.of(LIMIT).short_trim == int(LIMIT * KEEP)  # under glibc's own 64 MiB
    assert Levels.of(4 << 30).short_trim == LOOSE_TRIM


def test_readings_are_paced_by_the_room_under_the_hold_level() -> None:
    levels = Levels.of(LIMIT)
    assert levels.pause(levels.hold_at) == levels.pause(LIMIT) == FAST_S
    assert levels.pause(levels.hold_at - 1) == FAST_S  # nearly there: the fastest
    room = 100 * MIB
    assert levels.pause(levels.hold_at - room) == pytest.approx(room / RATE)
    assert Levels.of(64 << 30).pause(0) == SLOW_S  # far from it: the slowest


def test_a_trim_earns_the_next_one_a_step_later() -> None:
    levels = Levels.of(LIMIT)
    at = levels.trim_at + 10 * MIB
    assert levels.next_trim(at, held=False) == at + int(LIMIT * STEP)
    assert levels.next_trim(at, held=True) == at + int(LIMIT * HELD_STEP)
    assert levels.next_trim(0, held=False) == levels.trim_at + int(LIMIT * STEP)


def test_only_a_heap_that_fills_the_limit_is_held() -> None:
    levels = Levels.of(LIMIT)
    assert levels.hold(levels.hold_at - 1, heap=LIMIT) is None
    assert levels.hold(levels.hold_at, heap=levels.trim_at) is True
    assert levels.hold(levels.hold_at, heap=levels.trim_at - 1) is False  # cache, /dev/shm


def test_what_glibc_holds_free_is_bounded() -> None:
    levels = Levels.of(LIMIT)
    keep = levels.keep
    assert not levels.bounding(keep, mark=0, since_trim_s=RETRIM_S)  # at the bound: kept
    assert levels.bounding(keep + 1, mark=keep, since_trim_s=0.0)
    mark = levels.rebound(10 * MIB)  # after a trim that left 10 MiB counted free
    assert mark == 10 * MIB + keep
    assert not levels.bounding(mark - 1, mark, since_trim_s=RETRIM_S - 1)
    assert levels.bounding(mark - 1, mark, since_trim_s=RETRIM_S)
    assert levels.bounding(mark, mark, since_trim_s=0.0)


@pytest.mark.parametrize("working", [0, 50, 200, 300, 359])
def test_a_pipeline_s_whole_share_stays_at_tf_data_s_level(working: int) -> None:
    """A third of the room under ``LIVE_AT``: buffers and transients, ``TRANSIENT`` times
    the budget, fill up to it and no further."""
    limit = 600
    ram = ram_budget(limit, working)
    if ram > limit // FLOOR_SHARE:
        assert working + TRANSIENT * ram <= limit * LIVE_AT < working + TRANSIENT * (ram + 1)


def test_a_pipeline_always_gets_a_floor() -> None:
    assert ram_budget(600, 600) == ram_budget(600, 10_000) == 600 // FLOOR_SHARE
    assert ram_budget(600, None) == int(600 * LIVE_AT) // TRANSIENT
    assert ram_budget(16, 16) == 1


def test_pinned_memory_is_a_quarter_of_the_limit() -> None:
    assert (pinned_mib(4096), pinned_mib(2), pinned_mib(1)) == (1024, 1, 1)
