"""Freed host memory back to the kernel under a host-memory budget (``HOST_MEMORY_RELEASE``).

The allocator facts are read from fake memory maps under ``testdata/allocator``; the
decisions are pure; and in real interpreters, with each real framework, a freed 8 MiB
block goes back to the kernel under tfboot and stays in the process without it (glibc's
dynamic mmap threshold, which rises past the block after its first free). The tf.data case
in containers with real memory limits is tests/docker/test_host_memory_release.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support import decision, problem_text, run_python, tf_plan
from tfboot import resolve
from tfboot.budget.hostmemory import host_memory
from tfboot.budget.malloc import M_MMAP_THRESHOLD, MMAP_THRESHOLD, release
from tfboot.node.allocator import Allocator, read_allocator
from tfboot.node.cpu import CpuBudget
from tfboot.node.hostmem import MemoryBudget

MAPS = Path(__file__).parent / "testdata" / "allocator"
CPU = CpuBudget(8, None, "")
LIMIT = MemoryBudget(600, "/sys/fs/cgroup/memory.max")
GLIBC = Allocator("2.36")


def test_glibc_is_read_from_the_running_libc() -> None:
    found = read_allocator({}, str(MAPS / "maps-glibc"))
    assert found.glibc and found.glibc[0].isdigit() and not found.other and not found.chosen


@pytest.mark.parametrize(
    ("env", "maps", "other"),
    [
        ({"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}, "maps-glibc", "jemalloc (LD_PRELOAD)"),
        ({"LD_PRELOAD": "libtcmalloc_minimal.so.4"}, "maps-glibc", "tcmalloc (LD_PRELOAD)"),
        ({}, "maps-tcmalloc-linked", "tcmalloc (loaded in the process)"),
        ({}, "no-such-maps", ""),
    ],
)
def test_another_allocator_is_seen(env: dict[str, str], maps: str, other: str) -> None:
    assert read_allocator(env, str(MAPS / maps)).other == other


@pytest.mark.parametrize(
    ("env", "chosen"),
    [
        ({"MALLOC_ARENA_MAX": "2"}, ("MALLOC_ARENA_MAX=2",)),
        ({"MALLOC_MMAP_THRESHOLD_": "131072"}, ("MALLOC_MMAP_THRESHOLD_=131072",)),
        (
            {"GLIBC_TUNABLES": "glibc.pthread.rseq=0:glibc.malloc.trim_threshold=0"},
            ("GLIBC_TUNABLES=glibc.malloc.trim_threshold=0",),
        ),
        ({"GLIBC_TUNABLES": "glibc.pthread.rseq=0"}, ()),  # a tunable of another kind
        ({"MALLOC_ARENA_MAX": " "}, ()),
    ],
)
def test_the_users_allocator_settings_are_seen(env: dict[str, str], chosen: tuple) -> None:
    assert read_allocator(env, str(MAPS / "maps-glibc")).chosen == chosen


def decide(env: dict[str, str], allocator: Allocator = GLIBC, memory: MemoryBudget = LIMIT):
    settings = resolve(env)
    return release(settings, host_memory(settings, CPU, memory), allocator)


def test_under_a_limit_the_mmap_threshold_is_fixed() -> None:
    found = decide({})
    assert found is not None
    assert found.options == ((M_MMAP_THRESHOLD, MMAP_THRESHOLD, "M_MMAP_THRESHOLD"),)
    assert "glibc 2.36 mallopt M_MMAP_THRESHOLD=1 MiB" in found.why
    assert "HOST_MEMORY_LIMIT_MB=auto: 600 MiB from /sys/fs/cgroup/memory.max" in found.why
    assert "HOST_MEMORY_RELEASE=false leaves malloc alone" in found.why


def test_a_given_limit_counts_as_a_budget_too() -> None:
    found = decide({"HOST_MEMORY_LIMIT_MB": "4096"}, memory=MemoryBudget(None, ""))
    assert found is not None and found.options and "HOST_MEMORY_LIMIT_MB=4096 (env)" in found.why


@pytest.mark.parametrize("env", [{}, {"HOST_MEMORY_LIMIT_MB": "host"}])
def test_no_budget_no_change(env: dict[str, str]) -> None:
    memory = MemoryBudget(None, "") if not env else LIMIT
    assert decide(env, memory=memory) is None


@pytest.mark.parametrize(
    ("env", "allocator", "why"),
    [
        ({"HOST_MEMORY_RELEASE": "off"}, GLIBC,
         "malloc left alone (HOST_MEMORY_RELEASE=off (env))"),
        ({}, Allocator("2.36", chosen=("MALLOC_ARENA_MAX=2",)),
         "malloc left to the user's MALLOC_ARENA_MAX=2"),
        ({}, Allocator("2.36", other="jemalloc (LD_PRELOAD)"),
         "malloc left to jemalloc (LD_PRELOAD), which has its own settings"),
        ({}, Allocator(None), "malloc left alone: this libc is not glibc (musl's malloc"),
    ],
)  # fmt: skip
def test_left_alone_and_said_why(env: dict[str, str], allocator: Allocator, why: str) -> None:
    found = decide(env, allocator)
    assert found is not None and found.options == () and found.why.startswith(why)


def test_a_bad_switch_names_the_variable() -> None:
    text = problem_text({"HOST_MEMORY_RELEASE": "sometimes"})
    assert "HOST_MEMORY_RELEASE='sometimes' is invalid: expected true/false" in text


def test_tensorflows_line_says_what_was_set() -> None:
    plan = tf_plan({}, 0, CPU, LIMIT)
    assert "glibc" in decision(plan, "freed host memory returned to the kernel: glibc ")
    assert [c for c in plan.calls if getattr(c, "name", "") == "malloc"]


# A real interpreter, a real framework import through tfboot's hook, then glibc's own
# behaviour: free an 8 MiB block (mmapped, so glibc raises its threshold to 8 MiB), then take
# and free another 8 MiB. Without a fixed threshold the second comes from the heap, and
# glibc keeps it (its trim threshold rose to 16 MiB too); with tfboot's, it is unmapped.
KEPT = """
import ctypes, os, sys
import {module}
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
size = 8 << 20
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
block = libc.malloc(size); ctypes.memset(block, 1, size); libc.free(block)
before = rss()
block = libc.malloc(size); ctypes.memset(block, 1, size); libc.free(block)
print((rss() - before) >> 20)
"""


@pytest.mark.parametrize("module", ["tensorflow", "torch", "jax"])
@pytest.mark.parametrize(
    ("env", "kept"),
    [
        ({"HOST_MEMORY_LIMIT_MB": "4096"}, False),
        ({"HOST_MEMORY_LIMIT_MB": "4096", "HOST_MEMORY_RELEASE": "false"}, True),
        ({"HOST_MEMORY_LIMIT_MB": "4096", "MALLOC_ARENA_MAX": "4"}, True),  # the user chose
        ({"TFBOOT_DISABLE": "1"}, True),
    ],
)
def test_a_freed_block_goes_back_to_the_kernel(
    module: str, env: dict[str, str], kept: bool
) -> None:
    result = run_python(KEPT.format(module=module), {**env, "TFBOOT_LOG": "quiet"})
    assert result.returncode == 0, result.stderr
    held = int(result.stdout.split()[-1])
    assert (held >= 7) == kept, f"{module} kept {held} MiB after free ({env})"


def test_the_info_line_says_it(tmp_path: Path) -> None:
    result = run_python("import torch", {"HOST_MEMORY_LIMIT_MB": "2048"})
    assert result.returncode == 0, result.stderr
    assert "freed host memory returned to the kernel: glibc " in result.stderr
    assert "(under HOST_MEMORY_LIMIT_MB=2048 (env);" in result.stderr
