"""Reading the GPUs from NVML without CUDA, against a stand-in library.

No NVIDIA driver exists on the machines the suite runs on, so ``fake_nvml/nvml.c`` stands in
for ``libnvidia-ml`` (a fake, named as such): it answers the five calls tfboot makes. The real
library is read on a GPU node by ``tfboot selftest --framework jax|torch`` (docs/testing.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tfboot.node.nvml import LIBRARY_ENV, process_memory, read_inventory


@pytest.fixture
def library(nvml_library: str) -> str:
    return nvml_library


def test_totals_and_used_in_nvml_s_order(library: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NVML_MIB", "81559:500,40960:0")  # read by the library itself
    found = read_inventory({LIBRARY_ENV: library})
    assert found.totals == (81559 << 20, 40960 << 20) and found.used == (500 << 20, 0)
    assert found.count == 2 and found.problem == ""


def test_a_driver_that_fails_to_start_is_a_problem_not_a_crash(
    library: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FAKE_NVML_MIB", raising=False)
    found = read_inventory({LIBRARY_ENV: library})
    assert found.count == 0 and "nvmlInit_v2 returned NVML status 1" in found.problem


def test_no_library_means_no_gpu(tmp_path: Path) -> None:
    found = read_inventory({LIBRARY_ENV: str(tmp_path / "absent.so")})
    assert found.count == 0 and found.problem == ""


def test_a_process_s_own_total_by_nvml_index(library: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NVML_MIB", "81559:500,40960:0")
    monkeypatch.setenv("FAKE_NVML_PROCS", "0:4242:1500,1:4242:700,1:99:300,0:77:100")
    assert process_memory(4242, {LIBRARY_ENV: library}) == {0: 1500 << 20, 1: 700 << 20}
    assert process_memory(5, {LIBRARY_ENV: library}) == {}  # not listed: nothing claimed


def test_no_nvml_means_no_process_total(tmp_path: Path) -> None:
    assert process_memory(1, {LIBRARY_ENV: str(tmp_path / "absent.so")}) == {}
