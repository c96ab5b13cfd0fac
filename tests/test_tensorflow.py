"""Auto-apply at `import tensorflow`, with real TensorFlow (CPU wheel), one process per scenario."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support import REPO, last_json, run_module, run_python, scenario_env

pytestmark = pytest.mark.tf

LOGICAL_CPUS = "import tensorflow as tf; print(len(tf.config.list_logical_devices('CPU')))"
CGROUPS = REPO / "tests" / "testdata" / "cgroup"


def tfboot_lines(stderr: str, kind: str = "") -> list[str]:
    prefix = f"tfboot: {kind}" if kind else "tfboot:"
    return [line for line in stderr.splitlines() if line.startswith(prefix)]


def test_virtual_split_on_cpu() -> None:
    run = run_python(LOGICAL_CPUS, {"VIRTUAL_SPLIT": "3"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "3"
    lines = tfboot_lines(run.stderr)
    assert lines[0] == (
        "tfboot: configured TensorFlow: CPU:0 split into 3 logical CPUs "
        "(VIRTUAL_SPLIT=3 (env), no GPU)"
    )
    assert len(lines) == 2 and lines[1].startswith("tfboot: used: host memory peak ")


def test_invalid_value_fails_the_import() -> None:
    run = run_python("import tensorflow", {"MEMORY_LIMIT_MB": "abc"})
    assert run.returncode != 0
    assert "tfboot.ConfigError: MEMORY_LIMIT_MB='abc' is invalid" in run.stderr


ENTRY_POINTS = {
    "keras": "import keras, tensorflow as tf",
    "compat.v1": "import tensorflow.compat.v1 as v1; import tensorflow as tf",
    "import_module": "import importlib; tf = importlib.import_module('tensorflow')",
    "thread": textwrap.dedent(
        """
        import threading, sys
        t = threading.Thread(target=lambda: __import__('tensorflow'))
        t.start(); t.join()
        tf = sys.modules['tensorflow']
        """
    ),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_hook_fires_for_every_way_in(entry: str) -> None:
    code = ENTRY_POINTS[entry] + "\nprint(len(tf.config.list_logical_devices('CPU')))"
    run = run_python(code, {"VIRTUAL_SPLIT": "2", "KERAS_BACKEND": "tensorflow"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "2"
    assert len(tfboot_lines(run.stderr, "configured")) == 1


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_hook_fires_in_multiprocessing_children(method: str, tmp_path: Path) -> None:
    script = tmp_path / "children.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import multiprocessing as mp

            def count(_):
                import tensorflow as tf
                return len(tf.config.list_logical_devices("CPU"))

            if __name__ == "__main__":
                with mp.get_context("{method}").Pool(1) as pool:
                    print(pool.map(count, [0]))
            """
        )
    )
    run = run_python(script, {"VIRTUAL_SPLIT": "4"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[4]"


def test_pth_processed_twice_is_harmless() -> None:
    code = (
        "import site, sysconfig; site.addsitedir(sysconfig.get_paths()['purelib']); "
        "site.addsitedir(sysconfig.get_paths()['purelib']); " + LOGICAL_CPUS
    )
    run = run_python(code, {"VIRTUAL_SPLIT": "2"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "2"
    assert len(tfboot_lines(run.stderr, "configured")) == 1


def test_other_settings_are_applied() -> None:
    code = textwrap.dedent(
        """
        import tensorflow as tf
        print(tf.config.get_soft_device_placement(), tf.debugging.get_log_device_placement(),
              bool(tf.config.optimizer.get_jit()),
              tf.config.threading.get_intra_op_parallelism_threads(),
              tf.config.threading.get_inter_op_parallelism_threads())
        print(tf.keras.mixed_precision.global_policy().name)
        """
    )
    env = {
        "SOFT_PLACEMENT": "false",
        "LOG_DEVICE_PLACEMENT": "true",
        "XLA_JIT": "on",
        "CPU_THREADS": "3",
        "MIXED_PRECISION": "mixed_bfloat16",
        "KERAS_BACKEND": "tensorflow",
    }
    run = run_python(code, env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[:2] == ["False True True 3 3", "mixed_bfloat16"]


def test_cpu_quota_under_a_fake_cgroup_root() -> None:
    code = "import tensorflow as tf; print(tf.config.threading.get_intra_op_parallelism_threads())"
    run = run_python(code, {"TFBOOT_CGROUP_ROOT": str(CGROUPS / "v2-quota")})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "2"
    (line,) = tfboot_lines(run.stderr, "configured")
    assert (
        "intra-op threads 2 (CPU_THREADS=auto: quota 1.5 CPUs from /sys/fs/cgroup/cpu.max" in line
    )


def test_explicit_tf_thread_variables_win() -> None:
    code = (
        "import tensorflow as tf; tf.constant(1); t = tf.config.threading; "
        "print(t.get_intra_op_parallelism_threads(), t.get_inter_op_parallelism_threads())"
    )
    env = {"TFBOOT_CGROUP_ROOT": str(CGROUPS / "v1-docker"), "TF_NUM_INTRAOP_THREADS": "2"}
    run = run_python(code, env)
    assert run.returncode == 0, run.stderr
    # 0 means "not set through tf.config": TensorFlow reads TF_NUM_INTRAOP_THREADS itself.
    assert run.stdout.strip() == "0 1"
    assert "intra-op threads left to TF_NUM_INTRAOP_THREADS=2 (explicit)" in run.stderr


def test_cpu_threads_host_keeps_tf_default() -> None:
    code = "import tensorflow as tf; print(tf.config.threading.get_intra_op_parallelism_threads())"
    env = {"TFBOOT_CGROUP_ROOT": str(CGROUPS / "v1-docker"), "CPU_THREADS": "host"}
    run = run_python(code, env)
    assert run.stdout.strip() == "0" and not tfboot_lines(run.stderr)


class TestOnError:
    def test_warn_gives_one_line_and_tf_defaults(self) -> None:
        env = {"TFBOOT_ON_ERROR": "warn", "MEMORY_LIMIT_MB": "abc", "VIRTUAL_SPLIT": "3"}
        run = run_python(LOGICAL_CPUS, env)
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == "1"
        (line,) = tfboot_lines(run.stderr)
        assert line.startswith(
            "tfboot: warning: invalid configuration, TensorFlow keeps its defaults"
        )
        assert "MEMORY_LIMIT_MB='abc'" in line

    def test_invalid_on_error_itself_raises(self) -> None:
        run = run_python("import tensorflow", {"TFBOOT_ON_ERROR": "ignore"})
        assert run.returncode != 0 and "TFBOOT_ON_ERROR='ignore'" in run.stderr


class TestNoGpu:
    def test_require_gpu_true_is_an_error(self) -> None:
        run = run_python("import tensorflow", {"REQUIRE_GPU": "true"})
        assert run.returncode != 0
        assert (
            "REQUIRE_GPU='true' cannot be applied on this host: "
            "a GPU is required, but TensorFlow lists no GPU" in run.stderr
        )

    def test_visible_gpu_index_warns_once_and_runs_on_cpu(self) -> None:
        run = run_python(
            "import tensorflow as tf; print(tf.reduce_sum(tf.ones([3])).numpy())",
            {"VISIBLE_GPU": "1", "MEMORY_LIMIT_MB": "1024"},
        )
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == "3.0"
        assert tfboot_lines(run.stderr) == [
            "tfboot: warning: no GPU found, running on CPU; not applied: "
            "VISIBLE_GPU=1 (env), MEMORY_LIMIT_MB=1024 (env)"
        ]


def test_disable_reads_and_applies_nothing() -> None:
    env = {"TFBOOT_DISABLE": "1", "VIRTUAL_SPLIT": "3", "MEMORY_LIMIT_MB": "abc"}
    run = run_python(LOGICAL_CPUS, env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "1" and not tfboot_lines(run.stderr)


def test_runtime_already_initialised_is_a_clear_error() -> None:
    code = textwrap.dedent(
        """
        import tfboot
        tfboot.uninstall()
        import tensorflow as tf
        tf.constant(1.0) + 1
        try:
            tfboot.apply()
        except tfboot.ConfigError as exc:
            print("ConfigError:", exc)
        """
    )
    run = run_python(code, {"VIRTUAL_SPLIT": "2"})
    assert run.returncode == 0, run.stderr
    assert "ConfigError: TensorFlow's runtime was already initialised" in run.stdout
    assert "set_logical_device_configuration" in run.stdout


SEED_SNIPPET = textwrap.dedent(
    """
    import tensorflow as tf
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    tf.config.set_visible_devices(gpus, "GPU")
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 4)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    threads = tf.config.threading.get_intra_op_parallelism_threads()
    print(len(tf.config.list_logical_devices("CPU")), threads, float(tf.reduce_sum(tf.ones([2]))))
    """
)


@pytest.mark.parametrize(
    "env",
    [{}, {"TFBOOT_DISABLE": "true"}, {"VIRTUAL_SPLIT": "2", "CPU_THREADS": "3"}],
    ids=["no-variables", "disabled", "user-overrides-tfboot"],
)
def test_user_tf_config_after_import_keeps_working(env: dict[str, str]) -> None:
    run = run_python(SEED_SNIPPET, env)
    assert run.returncode == 0, run.stderr
    # The user's own calls, made right after import, decide: tfboot never started the runtime.
    assert run.stdout.strip() == "4 1 2.0"


def test_internal_module_names_in_the_working_directory(tmp_path: Path) -> None:
    for name in (
        "settings",
        "plan",
        "apply",
        "report",
        "errors",
        "cgroup",
        "cpu",
        "_hook",
        "dotenv",
    ):
        (tmp_path / f"{name}.py").write_text("raise ImportError('user module, not tfboot')\n")
    (tmp_path / ".env").write_text("MEMORY_LIMIT_MB=abc\nVIRTUAL_SPLIT=9\n")
    run = run_python(LOGICAL_CPUS, {"VIRTUAL_SPLIT": "2"}, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    # The .env in the working directory is not read: VIRTUAL_SPLIT=2 from the env, no error.
    assert run.stdout.strip() == "2"


def test_env_file_is_applied_and_env_wins(tmp_path: Path) -> None:
    env_file = tmp_path / "tfboot.env"
    env_file.write_text("VIRTUAL_SPLIT=3\nCPU_THREADS=2\n")
    code = LOGICAL_CPUS + "; print(tf.config.threading.get_intra_op_parallelism_threads())"
    run = run_python(code, {"TFBOOT_ENV_FILE": str(env_file), "CPU_THREADS": "1"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["3", "1"]
    assert f"VIRTUAL_SPLIT=3 (file {env_file})" in run.stderr


@pytest.mark.parametrize(
    "content", [None, "VIRTUAL_SPLIT=2\ngarbage line\n"], ids=["missing", "malformed"]
)
def test_bad_env_file_fails_the_import(tmp_path: Path, content: str | None) -> None:
    env_file = tmp_path / "tfboot.env"
    if content is not None:
        env_file.write_text(content)
    run = run_python("import tensorflow", {"TFBOOT_ENV_FILE": str(env_file)})
    assert run.returncode != 0
    assert f"TFBOOT_ENV_FILE={str(env_file)!r} is invalid" in run.stderr


def test_unreadable_env_file(tmp_path: Path) -> None:
    env_file = tmp_path / "tfboot.env"
    env_file.write_text("VIRTUAL_SPLIT=2\n")
    env_file.chmod(0o000)
    # root reads any file; drop the capabilities that let it, as a non-root user would lack them
    python = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", sys.executable]
    run = subprocess.run(
        [*python, "-c", "import tensorflow"],
        env=scenario_env({"TFBOOT_ENV_FILE": str(env_file)}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode != 0
    assert "cannot be read" in run.stderr and "permission denied" in run.stderr


def test_doctor_json() -> None:
    run = run_module(["tfboot", "doctor", "--json"], {"VIRTUAL_SPLIT": "2"})
    assert run.returncode == 0, run.stderr
    report = last_json(run.stdout)
    assert report["logical_devices"]["CPU"] == ["/device:CPU:0", "/device:CPU:1"]
    assert report["physical_devices"]["GPU"] == []
    assert report["settings"] == {"VIRTUAL_SPLIT": {"value": "2", "source": "env"}}
    assert report["applied"] is True and report["error"] is None
    assert report["threads"]["intra_op"] >= 1


def test_doctor_reports_an_error_with_exit_status_1() -> None:
    run = run_module(["tfboot", "doctor", "--json"], {"REQUIRE_GPU": "true"})
    assert run.returncode == 1
    assert "REQUIRE_GPU" in last_json(run.stdout)["error"]
