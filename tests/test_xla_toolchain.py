"""XLA's CUDA toolchain for ``XLA_JIT=true``: found in the real ``nvidia-cuda-nvcc-cu12`` pip
package installed in the test environment, and the user's ``XLA_FLAGS`` kept and extended.

``NO_TOOLKIT`` stands for a machine without ``/usr/local/cuda`` (this one may have one).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tfboot.node.xla import FLAG, has_toolchain, pip_toolchain, plan_toolchain

NO_TOOLKIT = "/nonexistent/cuda"


def test_the_pip_package_is_found_with_ptxas_and_libdevice() -> None:
    found = pip_toolchain()
    assert found is not None and found.endswith("nvidia/cuda_nvcc"), found
    assert (Path(found) / "bin" / "ptxas").is_file()
    assert list((Path(found) / "nvvm" / "libdevice").glob("libdevice*.bc"))


def test_xla_is_pointed_at_the_package() -> None:
    found = pip_toolchain()
    planned = plan_toolchain({}, found, NO_TOOLKIT)
    assert planned.xla_flags == f"{FLAG}={found}" and not planned.warning
    assert "the nvidia-cuda-nvcc pip package" in planned.decision


def test_the_users_xla_flags_are_kept_and_extended() -> None:
    found = pip_toolchain()
    planned = plan_toolchain({"XLA_FLAGS": " --xla_dump_to=/tmp/dump "}, found, NO_TOOLKIT)
    assert planned.xla_flags == f"--xla_dump_to=/tmp/dump {FLAG}={found}"


def test_a_toolkit_the_user_named_is_left_alone() -> None:
    env = {"XLA_FLAGS": f"{FLAG}=/opt/cuda --xla_dump_to=/tmp/x"}
    planned = plan_toolchain(env, pip_toolchain(), NO_TOOLKIT)
    assert planned.xla_flags is None and "explicit" in planned.decision


def test_a_toolkit_in_cuda_home_is_given_to_xla(tmp_path: Path) -> None:
    """XLA reads no CUDA_HOME (its CandidateCudaRoots names fixed places only), so a toolkit
    there goes through the flag, before the pip package."""
    (tmp_path / "nvvm" / "libdevice").mkdir(parents=True)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "ptxas").write_text("")
    assert has_toolchain(str(tmp_path))
    env = {"CUDA_HOME": str(tmp_path), "XLA_FLAGS": "--xla_dump_to=/tmp/x"}
    planned = plan_toolchain(env, pip_toolchain(), NO_TOOLKIT)
    assert planned.xla_flags == f"--xla_dump_to=/tmp/x {FLAG}={tmp_path}"
    assert "$CUDA_HOME, which XLA does not read itself" in planned.decision


def test_a_toolkit_where_xla_looks_itself_is_left_to_xla(tmp_path: Path) -> None:
    (tmp_path / "nvvm" / "libdevice").mkdir(parents=True)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "ptxas").write_text("")
    planned = plan_toolchain({}, pip_toolchain(), str(tmp_path))
    assert planned.xla_flags is None and "found by XLA" in planned.decision


def test_no_toolkit_anywhere_names_both_remedies() -> None:
    planned = plan_toolchain({}, None, NO_TOOLKIT)
    assert planned.xla_flags is None
    assert "pip install nvidia-cuda-nvcc-cu12" in planned.warning
    assert f"XLA_FLAGS={FLAG}=" in planned.warning


@pytest.mark.tf
def test_a_cpu_build_is_left_alone() -> None:
    """TensorFlow's CPU wheel compiles no CUDA: XLA_FLAGS stays unset at import."""
    from support import run_python

    code = "import os, tensorflow; print(os.environ.get('XLA_FLAGS'))"
    result = run_python(code, {"XLA_JIT": "true"})
    assert result.returncode == 0 and result.stdout.strip() == "None", result.stderr[-2000:]
