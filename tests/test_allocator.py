"""Freed host memory back to the kernel when it is short (``HOST_MEMORY_RELEASE``).

The allocator facts are read from fake memory maps under ``testdata/allocator``; the
decisions are pure; and in real interpreters, with each real framework, a freed 8 MiB
block stays in the process while memory is plentiful, as without tfboot (glibc's dynamic
mmap threshold, which rises past the block after its first free), and goes back to the
kernel once the working set is past the governor's levels. Forked children, ``multiprocessing``
children and PyTorch DataLoader workers (fork and forkserver) each get a governor. The
tf.data cases in containers with real memory limits are
tests/docker/test_container_host_memory.py; the governor's steps, tests/test_governor.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import decision, problem_text, run_python, tf_plan
from tfboot import resolve
from tfboot.budget.hostmemory import host_memory
from tfboot.budget.hostpolicy import HOLD_AT, KEEP, TRIM_AT
from tfboot.budget.malloc import release
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
    return release(settings, host_memory(settings, CPU, memory), allocator, memory.source)


def test_under_a_limit_the_governor_watches_the_cgroup() -> None:
    found = decide({})
    assert found is not None and found.watch is not None
    mib = 1 << 20
    levels = found.watch.levels
    limit = 600 * mib
    assert (levels.limit, levels.trim_at, levels.hold_at, levels.keep) == (
        limit, int(limit * TRIM_AT), int(limit * HOLD_AT), int(limit * KEEP))  # fmt: skip
    assert found.watch.limit_file == "/sys/fs/cgroup/memory.max" and found.watch.follows
    # The line at the import: the limit, whence, what is kept; how, in the detail (doctor)
    assert found.why == "host memory limit 600 MiB (HOST_MEMORY_LIMIT_MB=auto: 600 MiB from " \
        "/sys/fs/cgroup/memory.max), read again as it runs: freed memory kept up to 24 MiB " \
        "(4%), given back from 65% (HOST_MEMORY_RELEASE=false leaves malloc alone)"  # fmt: skip
    assert "the cgroup's working set, page cache and /dev/shm apart, watched against its " \
        "limit, 600 MiB now" in found.detail  # fmt: skip
    assert "glibc 2.36 keeps at most 4% of the limit free for reuse (24 MiB now), malloc_trim " \
        "from 65%, blocks of 1 MiB and more unmapped when freed from 75% of heap memory" \
        in found.detail  # fmt: skip


@pytest.mark.parametrize("memory", [MemoryBudget(None, ""), LIMIT])
def test_a_given_figure_watches_this_process_tree_in_a_container_or_not(memory) -> None:
    found = decide({"HOST_MEMORY_LIMIT_MB": "4096"}, memory=memory)
    assert found is not None and found.watch is not None and found.watch.limit_file == ""
    assert not found.watch.follows  # a figure does not move with the cgroup
    assert "host memory limit 4096 MiB (HOST_MEMORY_LIMIT_MB=4096 (env)) (this process and its " \
        "descendants)" in found.why  # fmt: skip
    assert "the resident sets of this process and its descendants watched against 4096 MiB " \
        "(HOST_MEMORY_LIMIT_MB=4096 (env); the figure is this process tree's" \
        in found.detail  # fmt: skip


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
    assert found is not None and found.watch is None and why in found.why
    assert found.why.startswith("host memory limit ")


def test_a_bad_switch_names_the_variable() -> None:
    text = problem_text({"HOST_MEMORY_RELEASE": "sometimes"})
    assert "HOST_MEMORY_RELEASE='sometimes' is invalid: expected true/false" in text


def test_tensorflows_line_says_what_was_set() -> None:
    plan = tf_plan({}, 0, CPU, LIMIT)
    assert "freed memory kept up to" in decision(plan, "host memory limit")
    assert "glibc" in plan.malloc  # how, for tfboot doctor
    assert [c for c in plan.calls if getattr(c, "name", "") == "memory governor"]


# A real interpreter, a real framework import through tfboot's hook, then glibc's own
# behaviour: free an 8 MiB block (with glibc's default, mmapped, so glibc raises its
# threshold to 8 MiB), then take and free another 8 MiB. Kept (tfboot's thresholds while
# plentiful, or glibc's own once raised) the second stays in the heap for the next step:
# none of it given back. Once the governor holds (the working set past its level), it is
# unmapped as it is freed.
# glibc's malloc and free, called directly: the start of each script below.
LIBC = """
import ctypes
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
"""
KEPT = """
import os, sys, time
import {module}
from tfboot.executor import governor
deadline = time.monotonic() + 10
while {short} and not (governor.current() and governor.current().holds):
    assert time.monotonic() < deadline, "the governor never held"
    time.sleep(0.01)
size = 8 << 20
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
block = libc.malloc(size); ctypes.memset(block, 1, size); libc.free(block)
block = libc.malloc(size); ctypes.memset(block, 1, size)
in_use = rss()
libc.free(block)
print((in_use - rss()) >> 20)
"""


@pytest.mark.parametrize("module", ["tensorflow", "torch", "jax"])
@pytest.mark.parametrize(
    ("env", "kept"),
    [
        ({"HOST_MEMORY_LIMIT_MB": "65536"}, True),  # plentiful: glibc as it is, no cost
        ({"HOST_MEMORY_LIMIT_MB": "64"}, False),  # short: the process is past 75% of it
        ({"HOST_MEMORY_LIMIT_MB": "64", "HOST_MEMORY_RELEASE": "false"}, True),
        ({"HOST_MEMORY_LIMIT_MB": "64", "MALLOC_ARENA_MAX": "4"}, True),  # the user chose
        ({"TFBOOT_DISABLE": "1"}, True),
    ],
)
def test_a_freed_block_goes_back_only_when_memory_is_short(
    module: str, env: dict[str, str], kept: bool
) -> None:
    code = LIBC + KEPT.format(module=module, short=not kept)
    result = run_python(code, {**env, "TFBOOT_LOG": "quiet"})
    assert result.returncode == 0, result.stderr
    given_back = int(result.stdout.split()[-1])
    assert (given_back < 1) == kept, f"{module} gave {given_back} MiB back on free ({env})"


# A step that frees more than glibc's own trim threshold at most (64 MiB): four blocks of
# 24 MiB, under glibc's largest mmap threshold, so from the heap. glibc's default gives the
# top of the heap back as the step frees it and faults it all in again on the next step;
# under a plentiful budget tfboot keeps it. Page faults of the same steps, counted exactly.
STEPS = """
import resource
import {module}
def step():
    blocks = [libc.malloc(24 << 20) for _ in range(4)]
    for block in blocks:
        ctypes.memset(block, 1, 24 << 20)
    for block in reversed(blocks):
        libc.free(block)
step(); step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.parametrize("module", ["torch", "tensorflow"])
def test_under_a_plentiful_budget_freed_memory_is_not_faulted_in_again(module: str) -> None:
    faults = {}
    for side, env in (("on", {"HOST_MEMORY_LIMIT_MB": "4096"}), ("off", {"TFBOOT_DISABLE": "1"})):
        result = run_python(LIBC + STEPS.format(module=module), {**env, "TFBOOT_LOG": "quiet"})
        assert result.returncode == 0, result.stderr
        faults[side] = int(result.stdout.split()[-1])
    # glibc's default: 96 MiB faulted in again each step, about 24,500 pages (fewer where
    # huge pages back part of it); kept: a few pages of Python's own
    assert faults["off"] > 5 * 2000, faults
    assert faults["on"] < 2000, faults


def test_the_info_line_says_it(tmp_path: Path) -> None:
    result = run_python("import torch", {"HOST_MEMORY_LIMIT_MB": "2048"})
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "host memory limit" in line]
    assert said == [
        "tfboot: configured PyTorch: host memory limit 2048 MiB (HOST_MEMORY_LIMIT_MB=2048 "
        "(env)) (this process "
        "and its descendants): freed memory kept up to 81 MiB (4%), given back from 65% "
        "(HOST_MEMORY_RELEASE=false leaves malloc alone)"
    ], result.stderr


# Every process the cgroup counts: a forked child, multiprocessing's fork and forkserver
# children, and PyTorch DataLoader workers of each start method, each report whether a
# governor runs in them (its thread alive, its own object) and whether they are held.
CHILDREN = """
import json, multiprocessing as mp, os, sys, threading
import torch
from tfboot.executor import governor

def state(_=None):
    found = governor.current()
    alive = any(t.name == "tfboot-memory" for t in threading.enumerate())
    return {"pid": os.getpid(), "governor": found is not None and alive,
            "id": id(found), "held": bool(found and found.held_since is not None)}

class Items(torch.utils.data.Dataset):
    def __len__(self):
        return 4
    def __getitem__(self, i):
        return torch.tensor([state()["governor"], state()["held"]])

if __name__ == "__main__":
    import time
    deadline = time.monotonic() + 10
    while {short} and not governor.current().holds:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    seen = {"parent": state()}
    pid = os.fork()
    if pid == 0:
        ok = state()["governor"] and state()["id"] != seen["parent"]["id"]
        os._exit(0 if ok else 3)
    seen["os.fork"] = os.waitpid(pid, 0)[1] == 0
    for method in ("fork", "forkserver", "spawn"):
        with mp.get_context(method).Pool(2) as pool:
            seen[f"pool {method}"] = pool.map(state, range(2))
        loader = torch.utils.data.DataLoader(Items(), batch_size=2, num_workers=2,
                                             multiprocessing_context=method)
        seen[f"loader {method}"] = [b.tolist() for b in loader]
    print(json.dumps(seen))
"""


@pytest.mark.slow
@pytest.mark.parametrize("short", [False, True])
def test_every_child_process_gets_a_governor(tmp_path: Path, short: bool) -> None:
    script = tmp_path / "children.py"
    script.write_text(CHILDREN.replace("{short}", str(short)))
    limit = "64" if short else "65536"
    result = run_python(script, {"HOST_MEMORY_LIMIT_MB": limit, "TFBOOT_LOG": "quiet"})
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["parent"]["governor"] and seen["parent"]["held"] == short
    assert seen["os.fork"], "a forked child has no governor of its own"
    for method in ("fork", "forkserver", "spawn"):
        assert all(s["governor"] for s in seen[f"pool {method}"]), (method, seen)
        # a fresh interpreter held only when its own working set is past the level
        for batch in seen[f"loader {method}"]:
            assert all(row[0] for row in batch), (method, seen)
    assert all(s["held"] == short for s in seen["pool fork"])  # inherited with the heap


# A parent held and trimming every few milliseconds forks 40 children that each allocate,
# free and exit: none inherits a lock taken or a thread state that breaks it.
FORKS = """
import os, time
import torch
from tfboot.executor import governor
while not governor.current().holds:
    time.sleep(0.01)
codes = []
for _ in range(40):
    pid = os.fork()
    if pid == 0:
        import numpy
        for _ in range(20):
            numpy.ones(1 << 20).sum()
        os._exit(0)
    codes.append(os.waitpid(pid, 0)[1])
print(sum(1 for c in codes if c == 0), governor.current().trims)
"""


@pytest.mark.slow
def test_forks_beside_a_trimming_governor_never_hang() -> None:
    result = run_python(FORKS, {"HOST_MEMORY_LIMIT_MB": "64", "TFBOOT_LOG": "quiet"}, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    done, trims = (int(w) for w in result.stdout.split()[-2:])
    assert done == 40 and trims >= 1


def test_doctor_and_the_usage_report_say_what_the_governor_did(tmp_path: Path) -> None:
    plenty = run_python(
        "from tfboot.doctor import collect, render; print(render(collect()))",
        {"HOST_MEMORY_LIMIT_MB": "65536", "TFBOOT_LOG": "quiet"},
    )
    assert plenty.returncode == 0, plenty.stderr[-3000:]
    assert "in this process so far: nothing to do: the working set stayed under" in plenty.stdout
    record = tmp_path / "usage.json"
    short = run_python(
        "import torch, time\nfrom tfboot.executor import governor\n"
        "while not governor.current().trims: time.sleep(0.01)",
        {"HOST_MEMORY_LIMIT_MB": "64", "TFBOOT_USAGE_FILE": str(record)},
    )
    assert short.returncode == 0, short.stderr[-3000:]
    released = json.loads(record.read_text())["host_memory"]["release"]
    assert released["trims"] >= 1 and released["holds"] == 1 and released["hold_at_mib"] == 48
    used = next(line for line in short.stderr.splitlines() if "tfboot: used:" in line)
    assert f"{released['trims']} malloc trim(s) gave back" in used
