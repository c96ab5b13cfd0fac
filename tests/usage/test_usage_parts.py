"""The usage report's parts without a framework: cgroup counters from fake trees (see
tests/testdata/cgroup/README.md), the suggestion's rules, the sinks and ``tfboot suggest``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import REPO
from tfboot.node import counters
from tfboot.usage import sinks
from tfboot.usage.measure import SCHEMA
from tfboot.usage.schema import problem
from tfboot.usage.suggest import percentile, run_needs, suggest

CGROUPS = REPO / "tests" / "testdata" / "cgroup"


def root(case: str) -> dict[str, str]:
    return {"TFBOOT_CGROUP_ROOT": str(CGROUPS / case)}


def test_v2_counters_name_their_files() -> None:
    memory = counters.memory(root("usage-v2"))
    assert memory.peak == 300 << 20 and memory.peak_source == "/sys/fs/cgroup/memory.peak"
    assert memory.current == 200 << 20
    assert memory.events == {"high": 3, "max": 5, "oom": 1, "oom_kill": 1}
    cpu = counters.cpu(root("usage-v2"))
    assert cpu.seconds == 10.0 and cpu.source == "/sys/fs/cgroup/cpu.stat usage_usec"
    assert (cpu.periods, cpu.throttled) == (100, 10)


def test_v2_without_memory_peak_gives_the_current_figure_to_sample() -> None:
    memory = counters.memory(root("usage-v2-no-peak"))
    assert memory.peak is None and memory.current == 200 << 20


def test_v1_counters() -> None:
    memory = counters.memory(root("usage-v1"))
    assert memory.peak == 500 << 20
    assert memory.peak_source == "/sys/fs/cgroup/memory/memory.max_usage_in_bytes"
    assert memory.events == {"oom_kill": 2, "max": 7}
    cpu = counters.cpu(root("usage-v1"))
    assert cpu.seconds == 5.0 and cpu.source == "/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage"
    assert (cpu.periods, cpu.throttled) == (40, 4)


def test_no_cgroup_falls_back_to_the_process_tree() -> None:
    memory = counters.memory(root("no-cgroup"))
    assert memory.peak and memory.peak > 1 << 20 and "ru_maxrss" in memory.peak_source
    cpu = counters.cpu(root("no-cgroup"))
    assert cpu.periods is None and "os.times" in cpu.source


def test_a_garbage_counter_file_is_left_out_not_raised(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(CGROUPS / "usage-v2", tree)
    (tree / "sys/fs/cgroup/memory.peak").write_bytes(b"\xff secret-looking text\n")
    (tree / "sys/fs/cgroup/cpu.stat").write_text("usage_usec nope\nnr_periods 9\n")
    memory = counters.memory({"TFBOOT_CGROUP_ROOT": str(tree)})
    assert memory.peak is None and memory.current == 200 << 20
    cpu = counters.cpu({"TFBOOT_CGROUP_ROOT": str(tree)})
    assert "os.times" in cpu.source and cpu.periods is None


def record(
    peak: float = 1000.0,
    limit: int | None = 2048,
    used: float = 1.0,
    quota: float | None = 2.0,
    throttled: float | None = 0.0,
    gpus: list[dict[str, Any]] | None = None,
    final: bool = True,
    **memory: Any,
) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "final": final,
        "gpus": gpus or [],
        "host_memory": {"peak_mib": peak, "limit_mib": limit, "oom_kills": 0, "high_events": 0}
        | memory,
        "cpu": {"used_cpus": used, "quota": quota, "throttled_fraction": throttled},
    }


def gpu(peak: float, cap: int | None, index: int = 0, physical: int = 0, **extra: Any) -> dict:
    return {"index": index, "physical": physical, "framework": "TensorFlow", "peak_mib": peak,
            "cap_mib": cap} | extra  # fmt: skip


def test_a_run_well_inside_its_budget_is_told_to_shrink_with_the_margin() -> None:
    found = suggest([record(peak=1000, used=1.0, gpus=[gpu(3000, 8192)])])
    assert found["env"] == {"MEMORY_LIMIT_MB": "3456"}  # 3000 x 1.15 = 3450, up to 16 MiB
    assert found["gpu_share_mib"] == 3456 + 1536  # nothing measured: TensorFlow's headroom
    assert found["resources"] == {
        "requests": {"memory": "1152Mi", "cpu": "1200m"},
        "limits": {"memory": "1152Mi", "cpu": "2"},
    }
    assert found["slurm"] == {"--mem": "1152M", "--cpus-per-task": 2}
    assert found["why"] == []


def test_an_oom_kill_grows_from_the_limit_never_shrinks() -> None:
    found = suggest([record(peak=900, limit=1024, oom_kills=1)])
    assert found["resources"]["limits"]["memory"] == "1280Mi"  # 1024 x 1.25
    assert "1 OOM kills" in found["why"][0]


def test_memory_high_events_and_a_peak_at_the_limit_grow_too() -> None:
    assert run_needs(record(peak=500, limit=1024, high_events=4))["memory_mib"] == 1280
    assert run_needs(record(peak=1000, limit=1024))["memory_mib"] == 1280
    assert run_needs(record(peak=500, limit=1024))["memory_mib"] == 575


def test_a_small_limit_grows_by_at_least_100_mib() -> None:
    assert run_needs(record(peak=300, limit=300, oom_kills=1))["memory_mib"] == 400


def test_a_run_with_no_final_report_was_killed_and_grows() -> None:
    assert run_needs(record(peak=500, limit=1024, final=False))["memory_mib"] == 1280
    assert run_needs(record(peak=500, limit=1024, final=False), False)["memory_mib"] == 575


def test_throttling_grows_the_cpu_from_the_quota() -> None:
    found = suggest([record(used=1.9, quota=2.0, throttled=0.3)])
    assert found["resources"]["requests"]["cpu"] == "2500m"
    assert found["resources"]["limits"]["cpu"] == "3"
    assert "throttled in 30.0% of periods" in found["why"][0]
    calm = suggest([record(used=0.3, quota=4.0, throttled=0.01)])
    assert (
        calm["resources"]["requests"]["cpu"] == "400m" and calm["resources"]["limits"]["cpu"] == "1"
    )


def resized(earlier: dict[str, Any], since: dict[str, Any], **now: Any) -> dict[str, Any]:
    """A record of a run resized once: its stretch under the earlier limit and quota, and
    its stretch since (``usage.stretches``)."""
    entry = record(**now)
    entry["host_memory"] |= {"earlier_limits": [earlier["memory"] | {"until": "T1"}],
                             "since_resize": since["memory"]}  # fmt: skip
    entry["cpu"] |= {"earlier_quotas": [earlier["cpu"] | {"until": "T1"}],
                     "since_resize": since["cpu"], "wall_seconds": 300.0}  # fmt: skip
    return entry


def test_each_peak_is_judged_against_the_limit_in_force_when_it_came() -> None:
    """1960 MiB under 2048 hit that limit; 600 MiB under 1024 since did not: the need grows
    from 2048, not from the limit at the end, and the line pairs each peak with its limit."""
    entry = resized(
        {"memory": {"limit_mib": 2048, "peak_mib": 1960.0, "oom_kills": 0},
         "cpu": {"quota": 2.0, "used_cpus": 1.2, "throttled_fraction": 0.0, "seconds": 120.0}},
        {"memory": {"peak_mib": 600.0, "oom_kills": 0},
         "cpu": {"used_cpus": 0.5, "throttled_fraction": 0.0, "seconds": 180.0}},
        peak=1960.0, limit=1024, used=0.78, quota=1.0,
    )  # fmt: skip
    needs = run_needs(entry)
    assert needs["memory_mib"] == 2048 * 1.25
    assert needs["why"] == ["host memory grows from its limit 2048 MiB (peak at the limit)"]
    assert needs["cpus"] == pytest.approx(1.2 * 1.15)  # the stretch of 2 minutes used 1.2
    line = sinks.used_line(entry)
    assert "host memory peak 600.0 MiB of 1024 MiB limit since a resize at T1 (before: " \
        "1960.0 MiB of 2048 MiB limit)" in line  # fmt: skip
    assert "CPU 0.50 of a 1-CPU quota since a resize at T1 (before: 1.20 of a 2-CPU quota, " \
        "throttled in 0.0% of periods), throttled in 0.0% of periods" in line  # fmt: skip
    assert problem(entry) is None


def test_a_figure_a_resize_made_is_said_to_be_the_resize_s() -> None:
    """Throttled and at the limit only under what a resize lowered: the need still grows
    from that limit, and the suggestion says the resize, not the job, made it."""
    entry = resized(
        {"memory": {"limit_mib": 2048, "peak_mib": 900.0, "oom_kills": 0},
         "cpu": {"quota": 2.0, "used_cpus": 0.9, "throttled_fraction": 0.0, "seconds": 120.0}},
        {"memory": {"peak_mib": 1010.0, "high_events": 3},
         "cpu": {"used_cpus": 0.98, "throttled_fraction": 0.4, "seconds": 180.0}},
        peak=1010.0, limit=1024, used=0.95, quota=1.0,
    )  # fmt: skip
    needs = run_needs(entry)
    assert needs["memory_mib"] == 1280 and needs["cpus"] == 1.25
    assert needs["notes"] == [
        "host memory hit its limit of 1024 MiB only after a resize lowered it from 2048 MiB: "
        "the resize, not the job, made that figure",
        "CPU hit its limit of 1.0 CPUs only after a resize lowered it from 2.0 CPUs: the "
        "resize, not the job, made that figure",
    ]


def test_a_shared_budget_is_said_in_the_line_and_named_in_the_record() -> None:
    entry = record()
    entry["host_memory"]["limit_shared"] = "the Pod's, shared with its other containers"
    entry["cpu"] |= {"quota_shared": "a parent cgroup's, shared with every process under /x",
                     "wall_seconds": 75.0}  # fmt: skip
    line = sinks.used_line(entry)
    assert "of 2048 MiB limit (shared: limit_shared)" in line
    assert "of a 2-CPU quota (shared: quota_shared)" in line
    assert problem(entry) is None


def test_stretches_a_record_cannot_hold_are_refused() -> None:
    entry = record()
    entry["cpu"]["earlier_quotas"] = [{"quota": -1}]
    assert problem(entry) == "the record.cpu.earlier_quotas[0].quota is not a number from 0 to " \
        f"{1 << 20:g}"  # fmt: skip
    entry = record()
    entry["host_memory"]["earlier_limits"] = [{}] * 33
    assert problem(entry) == "the record.host_memory.earlier_limits is not a list of at most 32"


def test_gpu_at_its_cap_or_with_allocator_ooms_grows() -> None:
    assert run_needs(record(gpus=[gpu(4000, 4096)]))["gpu_mib"] == 5120
    assert run_needs(record(gpus=[gpu(100, 4096, ooms=2)]))["gpu_mib"] == 5120


def test_a_split_gpu_needs_as_many_times_its_largest_logical_need() -> None:
    gpus = [gpu(1000, 2048, 0, 0), gpu(1500, 2048, 1, 0), gpu(500, 4096, 2, 1)]
    assert run_needs(record(gpus=gpus))["gpu_mib"] == 2 * 1500 * 1.15


def test_many_runs_at_their_percentiles() -> None:
    runs = [record(peak=100 * i, limit=None, used=0.1 * i) for i in range(1, 21)]
    found = suggest(runs)
    assert found["resources"]["limits"]["memory"] == "2304Mi"  # max 2000 x 1.15 = 2300
    assert found["resources"]["requests"]["cpu"] == "2200m"  # p95 of 0.1..2.0 is 1.9; x1.15
    assert percentile([3, 1, 2], 50) == 2 and percentile([5], 95) == 5


def test_measured_outside_pool_replaces_the_default_headroom() -> None:
    found = suggest([record(gpus=[gpu(1000, 2048, process_mib=1700.0, outside_pool_mib=700.0)])])
    assert found["gpu_share_mib"] == 1152 + 816  # 700 MiB outside the pool + 15%, up to 16
    assert "outside the pool, 700.0 MiB" in found["sources"]["gpu_share_mib"]


def test_the_used_line_reads_in_one_breath() -> None:
    """Every figure against its budget, over one window said once; the sources stay in the
    record; the suggestion last."""
    entry = record(gpus=[gpu(1234.5, 4096, source="tf.config.experimental.get_memory_info")])
    entry["host_memory"] |= {"source": "/sys/fs/cgroup/memory.peak"}
    entry["cpu"] |= {"wall_seconds": 75.25, "source": "cpu.stat usage_usec", "threads": 2,
                     "wall_source": "the process's start"}  # fmt: skip
    entry["suggest"] = suggest([entry])
    assert sinks.used_line(entry) == (
        "used: GPU:0 TensorFlow peak 1234.5 MiB of 4096 MiB cap; "
        "host memory peak 1000.0 MiB of 2048 MiB limit, 0 OOM kills, 0 memory.high events; "
        "CPU 1.00 of a 2-CPU quota, throttled in 0.0% of periods, 2 threads; "
        "over the 75.2 s since the process started; next time: MEMORY_LIMIT_MB=1424, "
        "requests.memory=1152Mi, requests.cpu=1200m, limits.memory=1152Mi, limits.cpu=2, "
        "Slurm --mem=1152M --cpus-per-task=2"
    )


def test_a_short_run_s_line_gives_no_cpu_figure_and_says_so_once() -> None:
    entry = record(limit=None, quota=None, used=0.35, throttled=None)
    entry["cpu"] |= {"wall_seconds": 5.1, "cpu_seconds": 1.8, "threads": 2}
    entry["suggest"] = suggest([entry])
    assert sinks.used_line(entry) == (
        "used: host memory peak 1000.0 MiB of no limit, 0 OOM kills, 0 memory.high events; "
        "CPU (no quota, 2 threads) not judged in a run under 60 s; over the 5.1 s since the "
        "process started; next time: requests.memory=1152Mi, limits.memory=1152Mi, "
        "Slurm --mem=1152M"
    )
    # The suggestion's JSON keeps why it holds no CPU figure.
    assert entry["suggest"]["notes"] == ["a run of 5.1 s gives no CPU figure (under 60 s)"]


def test_a_window_reads_as_a_person_reads_it() -> None:
    assert [sinks.duration(s) for s in (0.03, 59.96, 150, 7300)] == [
        "0.0 s", "60.0 s", "2.5 min", "2.0 h"
    ]  # fmt: skip
    job = record() | {"processes": 3}
    job["cpu"] |= {"wall_seconds": 600.0}
    assert sinks.used_line(job).startswith("used: job of 3 processes; host memory peak ")
    assert "; over the 10.0 min since the job started" in sinks.used_line(job)


def test_json_is_written_atomically(tmp_path: Path) -> None:
    path = tmp_path / "usage.json"
    sinks.write_json(str(path), {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["usage.json"]  # no temporary left


def test_the_termination_log_keeps_the_program_s_own_message(tmp_path: Path) -> None:
    path = tmp_path / "termination-log"
    path.write_text("")
    entry = record() | {"gpus": []}
    entry["host_memory"] |= {"source": "memory.peak"}
    entry["cpu"] |= {"wall_seconds": 1.0, "source": "cpu.stat"}
    log = sinks.TerminationLog(str(path))
    assert log.write(entry) and path.read_text().startswith("tfboot used: ")
    assert log.write(entry) and path.read_text().count("tfboot used:") == 1  # replaced, not added
    path.write_text("checkpoint failed: disk full\n")  # the program's own message
    assert log.write(entry)
    assert path.read_text().startswith("checkpoint failed: disk full\ntfboot used: ")
    assert log.write(entry) and path.read_text().count("checkpoint failed") == 1
    path.write_text("x" * 4000)  # no room for both: the program's message wins
    assert not log.write(entry) and path.read_text() == "x" * 4000
    assert len(sinks.termination_text(entry | {"gpus": [gpu(1, 2, source="x")] * 200})) <= 4096


def suggest_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfboot", "suggest", *args],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_suggest_reads_many_files(tmp_path: Path) -> None:
    paths = []
    for i, peak in enumerate((800, 1600, 1200)):
        path = tmp_path / f"pod-{i}.json"
        path.write_text(json.dumps(record(peak=peak, limit=4096, gpus=[gpu(2000, 4096)])))
        paths.append(str(path))
    run = suggest_cli("--env", *paths)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "MEMORY_LIMIT_MB=2304\n"
    found = json.loads(suggest_cli("--json", *paths).stdout)
    assert found["runs"] == 3 and found["suggest"]["resources"]["limits"]["memory"] == "1840Mi"
    text = suggest_cli(*paths).stdout
    assert "# memory: memory peak (cgroup), p100 of 3 runs, +15%" in text
    assert "kind: Job" in text and "MEMORY_LIMIT_MB=2304" in text


def test_suggest_env_without_gpu_is_empty_and_says_why(tmp_path: Path) -> None:
    path = tmp_path / "cpu-only.json"
    path.write_text(json.dumps(record(peak=800, limit=4096, gpus=[])))
    run = suggest_cli("--env", str(path))
    assert run.returncode == 0 and run.stdout == ""
    assert "no variable to set: no GPU memory was measured" in run.stderr


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"TOKEN=hunter2\n", "not JSON"),
        (b'{"schema": "other"}', "not a tfboot usage record"),
        (json.dumps({"schema": SCHEMA, "gpus": {}, "cpu": {}, "host_memory": {}}).encode(),
         "the record.gpus is missing or not a list"),
        (b'{"schema": "tfboot.usage/v1", "gpus": [], "host_memory": {"peak_mib": NaN}, '
         b'"cpu": {}}', "NaN is not a number a usage record holds"),
        (b'{"schema": "tfboot.usage/v1", "gpus": [], "host_memory": {}, "cpu": {"used_cpus": '
         b"Infinity}}", "Infinity is not a number"),
        (b'{"schema": "tfboot.usage/v1", "gpus": [], "host_memory": {"peak_mib": "900"}, '
         b'"cpu": {}}', "the record.host_memory.peak_mib is not a number"),
        (b'{"schema": "tfboot.usage/v1", "gpus": [{"index": 0, "physical": 0, "peak_mib": 5}], '
         b'"host_memory": {}, "cpu": {}}', "the record.gpus[0].framework is missing"),
        (b'{"schema": "tfboot.usage/v1", "gpus": [], "host_memory": {"peak_mib": 1e308}, '
         b'"cpu": {}}', "the record.host_memory.peak_mib is not a number from 0 to"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ],
)  # fmt: skip
def test_suggest_refuses_what_is_not_a_record_without_quoting_it(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    run = suggest_cli(str(path))
    assert run.returncode == 2 and reason in run.stderr and "hunter2" not in run.stderr
    assert "Traceback" not in run.stderr


def test_suggest_refuses_a_directory_and_a_bad_percentile(tmp_path: Path) -> None:
    run = suggest_cli(str(tmp_path))
    assert run.returncode == 2 and "not a regular file" in run.stderr
    run = suggest_cli("--cpu-percentile", "0", str(tmp_path))
    assert run.returncode == 2 and "expected a percentile from 1 to 100" in run.stderr
    assert os.path.isdir(tmp_path)


def test_suggest_refuses_a_fifo_before_opening_it(tmp_path: Path) -> None:
    fifo = tmp_path / "usage.json"
    os.mkfifo(fifo)
    run = suggest_cli(str(fifo))  # opening it would wait for a writer for ever
    assert run.returncode == 2 and "not a regular file" in run.stderr


def test_show_names_no_none_limit_with_a_quota_and_no_memory_limit() -> None:
    env = {**os.environ, **root("v2-quota")}
    shown = subprocess.run([sys.executable, "-m", "tfboot", "show"], capture_output=True,
                           text=True, timeout=60, env=env)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    line = next(x for x in shown.stdout.splitlines() if x.startswith("Host memory:"))
    assert "None" not in line and "no container memory limit" in line, line
