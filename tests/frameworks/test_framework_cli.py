"""``tfboot doctor --framework`` and ``tfboot selftest --framework`` with the real CPU wheels."""

from __future__ import annotations

import json

import pytest
from support import last_json, run_module

pytestmark = pytest.mark.slow


def doctor(env: dict[str, str], *frameworks: str) -> tuple[int, dict]:
    args = [a for f in frameworks for a in ("--framework", f)]
    done = run_module(["tfboot", "doctor", "--json", *args], env)
    return done.returncode, last_json(done.stdout)


def test_doctor_shows_what_jax_got_and_the_devices_it_sees() -> None:
    status, report = doctor({"CPU_THREADS": "1", "VIRTUAL_SPLIT": "2"}, "jax")
    jax = report["frameworks"]["jax"]
    assert status == 0 and list(report) == ["startup", "copy", "frameworks"]
    assert report["startup"] == {"ran": True, "why": None}
    assert report["copy"]["injected"] is False and report["copy"]["stood_down"] is False
    assert jax["devices"] == ["cpu:0 (cpu)", "cpu:1 (cpu)"]
    assert jax["environ"] == {"JAX_NUM_CPU_DEVICES": "2"}
    assert jax["decisions"] == [
        "2 CPU devices via JAX_NUM_CPU_DEVICES (VIRTUAL_SPLIT=2 (env), no GPU)",
        "CPU client pool 1 threads (CPU_THREADS=1 (env))",
    ]
    # JAX gives each CPU device a thread of its pool at least.
    assert jax["threads"] == {"cpu_pool": 2}


def test_doctor_with_pytorch_and_tensorflow_names_each_and_the_data_loader() -> None:
    status, report = doctor({"CPU_THREADS": "1"}, "torch", "tensorflow")
    torch = report["frameworks"]["torch"]
    assert status == 0 and torch["threads"] == {"intra_op": 1, "inter_op": 1}
    assert torch["devices"] == ["cpu"] and torch["role"] == "runs the model"
    assert report["decisions"][0].startswith("no GPU: PyTorch runs the model")
    # TensorFlow's own import brings JAX in: it came along, and the doctor says so.
    assert report["frameworks"]["jax"]["role"] == "came along with TensorFlow's import"


def test_doctor_reports_a_refusal_and_fails() -> None:
    status, report = doctor({"VIRTUAL_SPLIT": "2"}, "torch")
    assert status == 1
    assert report["frameworks"]["torch"]["error"].startswith(
        "PyTorch: VIRTUAL_SPLIT='2' cannot be applied"
    )


@pytest.mark.parametrize(("framework", "name"), [("jax", "JAX"), ("torch", "PyTorch")])
def test_selftest_without_a_gpu_skips_every_row_with_status_3(framework: str, name: str) -> None:
    done = run_module(["tfboot", "selftest", "--framework", framework, "--json"], {})
    report = json.loads(done.stdout)
    assert done.returncode == 3 and report["exit_status"] == 3
    assert report["framework"] == name and report["gpus"] == []
    assert [(r["row"], r["status"]) for r in report["rows"]] == [
        ("visibility", "SKIP"),
        ("cap", "SKIP"),
        ("growth", "SKIP"),
    ]
    text = run_module(["tfboot", "selftest", "--framework", framework], {})
    assert f"no GPU: {name} " in text.stdout and text.returncode == 3


def test_only_names_tensorflow_s_rows() -> None:
    done = run_module(["tfboot", "selftest", "--framework", "jax", "--only", "memory_limit"], {})
    assert done.returncode == 2 and "--only names TensorFlow's rows" in done.stderr
