"""Generated inputs for what reads usage records back and what writes them: ``tfboot
suggest``'s reader and suggestion, the ``used:`` line, the termination log and the metrics,
and the credential rule. ``TFBOOT_FUZZ_EXAMPLES`` sets how many (default 200; the closing
runs take 10000)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tfboot.suggestcmd import UnusableFile, read_record
from tfboot.usage import sinks
from tfboot.usage.metrics import registry
from tfboot.usage.schema import MAX_MIB, SCHEMA
from tfboot.usage.suggest import patch, suggest, summary
from tfboot.values import hide_credentials, shorten

pytestmark = pytest.mark.fuzz

EXAMPLES = int(os.environ.get("TFBOOT_FUZZ_EXAMPLES", "200"))
fuzz = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])  # fmt: skip

# Numbers of every kind a file may hold: in range, huge, negative, not finite, not numbers.
numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.just(1e308), st.booleans(), st.none(), st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
)  # fmt: skip
gpu = st.fixed_dictionaries(
    {"index": numbers, "physical": numbers, "framework": st.one_of(st.text(max_size=8), numbers),
     "peak_mib": numbers},
    optional={"cap_mib": numbers, "ooms": numbers, "pool_mib": numbers, "pid": numbers,
              "outside_pool_mib": numbers, "pool_source": numbers, "source": st.text(max_size=8)},
)  # fmt: skip
# A GPU share's variables, as a record keeps them, and anything else in their place.
share_names = st.sampled_from(
    [
        "CUDA_DEVICE_MEMORY_LIMIT",
        "CUDA_DEVICE_MEMORY_LIMIT_0",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
        "CUDA_MPS_PIPE_DIRECTORY",
        "NVIDIA_GPU_MEMORY_LIMITS",
        "GPU_PORTION",
        "ALIYUN_COM_GPU_MEM_CONTAINER",
        "ALIYUN_COM_GPU_MEM_DEV",
    ]
)
share_values = st.one_of(
    st.sampled_from(["8192m", "6G", "0=6G,1=2G", "/tmp/mps", "0.5", "8", "81920", "x=y,=", ""]),
    st.text(max_size=8),
)
sane_share = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {
            "plugins": st.lists(
                st.sampled_from(["HAMi", "MPS", "KAI", "gpushare"]), max_size=4, unique=True
            ),
            "variables": st.dictionaries(share_names, share_values, max_size=4),
        }
    ),
)
share = st.one_of(
    sane_share,
    numbers,
    st.fixed_dictionaries(
        {
            "plugins": st.one_of(numbers, st.lists(st.text(max_size=8), max_size=6)),
            "variables": st.one_of(
                numbers, st.dictionaries(st.text(max_size=30), numbers, max_size=3)
            ),
        }
    ),
)
section = st.dictionaries(
    st.sampled_from(["peak_mib", "limit_mib", "oom_kills", "high_events", "used_cpus", "quota",
                     "wall_seconds", "cpu_seconds", "throttled_fraction", "threads", "source"]),
    numbers, max_size=8,
)  # fmt: skip
base = {"schema": st.sampled_from([SCHEMA, SCHEMA, "other"]), "final": st.one_of(st.booleans(),
        numbers), "gpus": st.one_of(st.lists(gpu, max_size=3), numbers),
        "host_memory": st.one_of(section, numbers), "cpu": st.one_of(section, numbers),
        "gpu_share": share}  # fmt: skip
member = st.fixed_dictionaries(base, optional={"pid": numbers})
record = st.fixed_dictionaries(
    base,
    optional={"pid": numbers, "run": st.one_of(st.fixed_dictionaries({"id": st.text(max_size=4),
              "lead": st.booleans()}), numbers), "members": st.one_of(st.lists(member, max_size=3),
              numbers)},
)  # fmt: skip


# Records whose every figure is in range, as tfboot writes them: the suggestion's own paths.
figure = st.one_of(st.none(), st.floats(min_value=0, max_value=MAX_MIB),
                   st.integers(min_value=0, max_value=10**6))  # fmt: skip
count = st.one_of(st.none(), st.integers(min_value=0, max_value=10**6))
sane_gpu = st.fixed_dictionaries(
    {"index": st.integers(0, 7), "physical": st.integers(0, 7),
     "framework": st.sampled_from(["TensorFlow", "JAX", "PyTorch"]), "peak_mib": figure},
    optional={"cap_mib": figure, "ooms": count, "pool_mib": figure, "outside_pool_mib": figure,
              "pid": st.integers(1, 10**6)},
)  # fmt: skip
sane_memory = st.fixed_dictionaries(
    {}, optional={"peak_mib": figure, "limit_mib": figure, "oom_kills": count, "high_events": count}
)
sane_cpu = st.fixed_dictionaries(
    {},
    optional={
        "used_cpus": st.one_of(st.none(), st.floats(0, 4096)),
        "quota": st.one_of(st.none(), st.floats(0, 4096)),
        "wall_seconds": st.one_of(st.none(), st.floats(0, 10**8)),
        "throttled_fraction": st.one_of(st.none(), st.floats(0, 1)),
        "threads": count,
    },
)
sane_base = {"schema": st.just(SCHEMA), "final": st.booleans(),
             "gpus": st.lists(sane_gpu, max_size=4), "host_memory": sane_memory,
             "cpu": sane_cpu, "gpu_share": sane_share}  # fmt: skip
sane = st.fixed_dictionaries(
    sane_base,
    optional={"pid": st.integers(1, 10**6), "run": st.fixed_dictionaries({"id": st.sampled_from(
              ["a", "b"]), "lead": st.booleans()}), "members": st.lists(
              st.fixed_dictionaries(sane_base, optional={"pid": st.integers(1, 10**6)}),
              max_size=3)},
)  # fmt: skip


def _dump(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


def _finite(value: Any) -> bool:
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return not isinstance(value, float) or math.isfinite(value)


def _read(tmp_path: Path, data: bytes) -> dict[str, Any] | None:
    path = tmp_path / "usage.json"
    path.write_bytes(data)
    try:
        return read_record(str(path))
    except UnusableFile as exc:
        assert str(path) in str(exc)
        return None


@fuzz
@given(data=st.binary(max_size=300) | st.builds(_dump, record) | st.builds(_dump, sane))
def test_suggest_takes_a_record_or_says_why_never_more(tmp_path: Path, data: bytes) -> None:
    found = _read(tmp_path, data)
    event("refused" if found is None else "read")
    if found is None:
        return
    suggestion = suggest([found, found])
    assert _finite(suggestion)
    limits = [suggestion["resources"].get("limits", {})] + [
        terms.get("resources", {}).get("limits", {})
        for terms in suggestion.get("gpu_share", {}).values()
    ]
    for value in (value for found_limits in limits for value in found_limits.values()):
        assert len(value) <= 12  # a sane quantity: 16 TiB is "16777216Mi"
    assert summary(suggestion) and patch(suggestion, "Job", "train", "train")
    text = sinks.termination_text(found)
    assert len(text) <= sinks.TERMINATION_BYTES
    registry(found)


@fuzz
@given(depth=st.integers(min_value=1, max_value=200_000), kind=st.sampled_from("[{"))
def test_nesting_of_any_depth_is_refused_or_read(tmp_path: Path, depth: int, kind: str) -> None:
    close = "]" if kind == "[" else "}"
    opener = kind if kind == "[" else '{"a":'
    text = opener * depth + "1" + close * depth
    assert _read(tmp_path, text.encode()) is None


@fuzz
@given(theirs=st.binary(max_size=5000), again=st.booleans())
def test_the_termination_log_keeps_the_program_s_bytes(tmp_path: Path, theirs: bytes,
                                                       again: bool) -> None:  # fmt: skip
    path = tmp_path / "termination-log"
    path.write_bytes(theirs)
    entry = {"schema": SCHEMA, "final": True, "gpus": [], "labels": {"job": "j"},
             "host_memory": {"peak_mib": 1.0, "source": "x"},
             "cpu": {"used_cpus": 1.0, "wall_seconds": 1.0, "source": "x"}}  # fmt: skip
    log = sinks.TerminationLog(str(path))
    wrote = log.write(entry)
    if again:
        wrote = log.write(entry)
    written = path.read_bytes()
    assert len(written) <= sinks.TERMINATION_BYTES or written == theirs
    if wrote:
        kept = theirs.rstrip(b"\n")
        assert written.startswith(kept) and written.endswith(sinks.termination_text(entry))
    else:
        assert written == theirs


@fuzz
@given(user=st.text(max_size=12), secret=st.text(min_size=1, max_size=12),
       scheme=st.sampled_from(["http://", "https://", "HTTP://", ""]),
       host=st.sampled_from(["gw", "127.0.0.1", "[::1]", "gw:9091", "gw:90910"]),
       tail=st.sampled_from(["", "/", "/path", "/p@q", "?x=1"]))  # fmt: skip
def test_a_url_s_password_is_never_shown(user: str, secret: str, scheme: str, host: str,
                                         tail: str) -> None:  # fmt: skip
    marker = f"SECRET{secret}"
    url = f"{scheme}{user}:{marker}@{host}{tail}"
    assert marker not in hide_credentials(url) and marker not in shorten(url)


def test_the_largest_sane_figure_gives_a_short_quantity() -> None:
    entry = {"schema": SCHEMA, "final": True, "gpus": [],
             "host_memory": {"peak_mib": float(MAX_MIB)}, "cpu": {}}  # fmt: skip
    assert len(suggest([entry])["resources"]["limits"]["memory"]) <= 12
