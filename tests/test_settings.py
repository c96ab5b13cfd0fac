"""The settings parser: every variable of the contract, precedence, and error messages."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import problem_text
from tfboot import ConfigError, resolve


@pytest.mark.parametrize(
    ("name", "value", "accepted"),
    [
        ("VISIBLE_GPU", "first", "expected all, none, a GPU index"),
        ("VISIBLE_GPU", "-1", "expected all, none"),
        ("VISIBLE_GPU", "0,0", "listed more than once"),
        ("MEMORY_LIMIT_MB", "abc", "number of MiB from 1 to 1048576"),
        ("MEMORY_LIMIT_MB", "-5", "number of MiB from 1 to 1048576"),
        ("MEMORY_LIMIT_MB", "0", "number of MiB from 1 to 1048576"),
        ("MEMORY_LIMIT_MB", "6G", "number of MiB from 1 to 1048576"),
        ("VIRTUAL_SPLIT", "0", "count from 1 to 64"),
        ("VIRTUAL_SPLIT", "65", "count from 1 to 64"),
        ("VIRTUAL_SPLIT", "2048,", "list of up to 64 MiB sizes"),
        ("VIRTUAL_SPLIT", "2048,-1", "list of up to 64 MiB sizes"),
        ("MEMORY_GROWTH", "maybe", "true/false"),
        ("CPU_THREADS", "0", "auto, host or a thread count from 1 to 1024"),
        ("CPU_THREADS", "1.5", "auto, host or a thread count from 1 to 1024"),
        ("SOFT_PLACEMENT", "2", "true/false"),
        ("LOG_DEVICE_PLACEMENT", "y", "true/false"),
        ("XLA_JIT", "auto", "true/false"),
        ("MIXED_PRECISION", "float16", "mixed_float16, mixed_bfloat16, float32"),
        ("REQUIRE_GPU", "required", "true/false"),
        ("TFBOOT_ON_ERROR", "ignore", "raise, warn"),
        ("TFBOOT_LOG", "verbose", "quiet, info, debug"),
        ("TFBOOT_DISABLE", "please", "true/false"),
    ],
)
def test_invalid_value_names_variable_value_and_accepted(
    name: str, value: str, accepted: str
) -> None:
    text = problem_text({name: value})
    assert f"{name}={value!r}" in text
    assert accepted in text


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        resolve({"MEMORY_LIMIT_MB": "x", "VIRTUAL_SPLIT": "y", "CPU_THREADS": "z"})
    assert [p.variable for p in info.value.problems] == [
        "MEMORY_LIMIT_MB",
        "VIRTUAL_SPLIT",
        "CPU_THREADS",
    ]
    assert str(info.value).startswith("3 problems")


def test_a_large_split_count_suggests_the_cap() -> None:
    assert "use MEMORY_LIMIT_MB=4096" in problem_text({"VIRTUAL_SPLIT": "4096"})


@pytest.mark.parametrize(
    ("env", "attr", "expected"),
    [
        ({}, "visible_gpu", None),
        ({"VISIBLE_GPU": "ALL"}, "visible_gpu", None),
        ({"VISIBLE_GPU": "None"}, "visible_gpu", ()),
        ({"VISIBLE_GPU": "1"}, "visible_gpu", (1,)),
        ({"VISIBLE_GPU": " 0, 2 "}, "visible_gpu", (0, 2)),
        ({"MEMORY_LIMIT_MB": "6144"}, "memory_limit_mb", 6144),
        ({"VIRTUAL_SPLIT": "2"}, "virtual_split", 2),
        ({"VIRTUAL_SPLIT": "2048,2048,4096"}, "virtual_split", (2048, 2048, 4096)),
        ({"MEMORY_GROWTH": "On"}, "memory_growth", True),
        ({"MEMORY_GROWTH": "0"}, "memory_growth", False),
        ({"CPU_THREADS": "HOST"}, "cpu_threads", "host"),
        ({"CPU_THREADS": "3"}, "cpu_threads", 3),
        ({}, "cpu_threads", "auto"),
        ({"MIXED_PRECISION": "Mixed_BFloat16"}, "mixed_precision", "mixed_bfloat16"),
        ({"REQUIRE_GPU": "yes"}, "require_gpu", True),
        ({"MEMORY_LIMIT_MB": ""}, "memory_limit_mb", None),
    ],
)
def test_valid_values(env: dict[str, str], attr: str, expected: object) -> None:
    assert getattr(resolve(env), attr) == expected


def test_split_sizes_must_fit_the_cap() -> None:
    text = problem_text({"MEMORY_LIMIT_MB": "4096", "VIRTUAL_SPLIT": "2048,2048,1024"})
    assert "VIRTUAL_SPLIT" in text and "5120 MiB" in text and "4096 MiB" in text
    assert resolve({"MEMORY_LIMIT_MB": "4096", "VIRTUAL_SPLIT": "2048,2048"}).virtual_split == (
        2048,
        2048,
    )


def test_split_count_larger_than_cap_is_an_error() -> None:
    assert "cannot share a cap of 3 MiB" in problem_text(
        {"MEMORY_LIMIT_MB": "3", "VIRTUAL_SPLIT": "4"}
    )


@pytest.mark.parametrize(
    ("split", "cap", "gpu", "sizes", "said"),
    [
        (2, 6145, None, (3072, 3072), ""),
        (2, 6145, 0, (3072, 3072), ""),
        ((256, 768), None, 0, (256, 768), ""),
        ((256, 768), 1024, 1, (256, 768), ""),
        (1, None, 0, (), ""),
        (2, None, None, (), ""),  # judged per GPU, once a GPU is listed
        (2, None, 1, (), "splitting GPU:1 into 2 logical GPUs needs a memory cap"),
        ((2048, 2048, 1024), 4096, None, (),
         "the sizes add up to 5120 MiB, more than the cap of 4096 MiB (MEMORY_LIMIT_MB); "
         "make the sizes fit the cap"),
        ((1024, 1024), 1536, 1, (), "the sizes add up to 2048 MiB, more than GPU:1's cap of 1536"),
        (4, 3, None, (), "4 logical GPUs cannot share a cap of 3 MiB"),
        (4, 3, 2, (), "4 logical GPUs cannot share GPU:2's cap of 3 MiB"),
    ],
)  # fmt: skip
def test_one_rule_fits_a_split_to_a_cap(split, cap, gpu, sizes, said) -> None:
    """``split_fit``: what the contract checks against ``MEMORY_LIMIT_MB`` (and a share's
    caps) and what each GPU's plan divides, one rule."""
    from tfboot.settings import split_fit

    found, problem = split_fit(split, cap, "given", gpu)
    assert found == sizes
    assert (problem is None) == (not said)
    if problem is not None:
        assert said in str(problem) and str(problem).startswith("VIRTUAL_SPLIT='given'")
        assert ("cannot be applied on this host" in str(problem)) == (cap is None)


def test_a_split_counts_its_logical_devices() -> None:
    from tfboot.settings import split_count, split_shown

    assert [split_count(s) for s in (1, 3, (512,), (256, 768))] == [1, 3, 1, 2]
    assert [split_shown(s) for s in (3, (256, 768))] == ["3", "256,768"]


def test_growth_contradicting_tf_force_gpu_allow_growth() -> None:
    text = problem_text({"MEMORY_GROWTH": "false", "TF_FORCE_GPU_ALLOW_GROWTH": "true"})
    assert "TF_FORCE_GPU_ALLOW_GROWTH" in text
    assert resolve({"MEMORY_GROWTH": "true", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}).memory_growth


class TestDevicePluginAuto:
    def test_hami_per_device(self) -> None:
        settings = resolve(
            {
                "MEMORY_LIMIT_MB": "auto",
                "CUDA_DEVICE_MEMORY_LIMIT_0": "6144m",
                "CUDA_DEVICE_MEMORY_LIMIT_1": "4g",
            }
        )
        # The share minus TensorFlow's headroom, and NCCL's: two GPUs are visible.
        assert settings.caps_mb(0) == 6144 - 2560 and settings.caps_mb(1) == 4096 - 2560
        assert settings.source("MEMORY_LIMIT_MB").startswith(
            "HAMi CUDA_DEVICE_MEMORY_LIMIT_0=6144m, CUDA_DEVICE_MEMORY_LIMIT_1=4g (enforced) "
            "minus 2560 MiB of headroom for TensorFlow"
        )

    def test_hami_for_all_devices(self) -> None:
        settings = resolve({"MEMORY_LIMIT_MB": "AUTO", "CUDA_DEVICE_MEMORY_LIMIT": "4096m"})
        assert settings.caps_mb(3) == 4096 - 1536

    @pytest.mark.parametrize("value", ["4g", "4096m", "4194304k", "4294967296", "4294967296 "])
    def test_hami_amounts_as_hami_core_reads_them(self, value: str) -> None:
        """HAMi-core's own forms: a bare number is bytes."""
        settings = resolve({"MEMORY_LIMIT_MB": "auto", "CUDA_DEVICE_MEMORY_LIMIT": value})
        assert settings.caps_mb(0) == 4096 - 1536

    def test_a_bare_hami_number_is_bytes_not_mib(self) -> None:
        text = problem_text({"MEMORY_LIMIT_MB": "auto", "CUDA_DEVICE_MEMORY_LIMIT": "4096"})
        assert "CUDA_DEVICE_MEMORY_LIMIT='4096'" in text and "a bare number is bytes" in text

    def test_hami_share_too_small_for_the_headroom(self) -> None:
        env = {"MEMORY_LIMIT_MB": "auto", "CUDA_DEVICE_MEMORY_LIMIT_0": "1536m"}
        text = problem_text(env)
        assert "the share of 1536 MiB for GPU 0 (HAMi CUDA_DEVICE_MEMORY_LIMIT_0=1536m)" in text
        assert "is at or below 1536 MiB of headroom for TensorFlow" in text

    def test_gpushare_gib(self) -> None:
        settings = resolve({"MEMORY_LIMIT_MB": "auto", "ALIYUN_COM_GPU_MEM_CONTAINER": "6"})
        assert settings.memory_limit_mb == 6144 - 1536
        assert "gpushare" in settings.source("MEMORY_LIMIT_MB")
        assert "(advisory)" in settings.source("MEMORY_LIMIT_MB")

    def test_gpushare_mib_unit(self) -> None:
        env = {
            "MEMORY_LIMIT_MB": "auto",
            "ALIYUN_COM_GPU_MEM_CONTAINER": "3000",
            "ALIYUN_COM_GPU_MEM_DEV": "16160",
        }
        assert resolve(env).memory_limit_mb == 3000 - 1536

    def test_auto_without_a_plugin_is_an_error(self) -> None:
        text = problem_text({"MEMORY_LIMIT_MB": "auto"})
        assert "CUDA_DEVICE_MEMORY_LIMIT" in text and "ALIYUN_COM_GPU_MEM_CONTAINER" in text

    def test_invalid_plugin_value(self) -> None:
        text = problem_text({"MEMORY_LIMIT_MB": "auto", "CUDA_DEVICE_MEMORY_LIMIT_0": "lots"})
        assert "CUDA_DEVICE_MEMORY_LIMIT_0='lots'" in text

    def test_plugin_variables_unused_without_auto(self) -> None:
        settings = resolve({"MEMORY_LIMIT_MB": "1024", "CUDA_DEVICE_MEMORY_LIMIT_0": "6144m"})
        assert settings.caps_mb(0) == 1024


class TestEnvFile:
    def write(self, tmp_path: Path, text: str) -> str:
        path = tmp_path / "tfboot.env"
        path.write_text(text)
        return str(path)

    def test_file_values_apply_and_env_wins(self, tmp_path: Path) -> None:
        path = self.write(tmp_path, "MEMORY_LIMIT_MB=2048\nVIRTUAL_SPLIT=2\n# comment\n")
        settings = resolve({"TFBOOT_ENV_FILE": path, "VIRTUAL_SPLIT": "4"})
        assert settings.memory_limit_mb == 2048
        assert settings.source("MEMORY_LIMIT_MB") == f"file {path}"
        assert settings.virtual_split == 4 and settings.source("VIRTUAL_SPLIT") == "env"

    def test_file_values_are_validated(self, tmp_path: Path) -> None:
        path = self.write(tmp_path, "MEMORY_LIMIT_MB=lots\n")
        text = problem_text({"TFBOOT_ENV_FILE": path})
        assert "MEMORY_LIMIT_MB: the value on line 1 of" in text and "lots" not in text

    def test_missing_file(self, tmp_path: Path) -> None:
        text = problem_text({"TFBOOT_ENV_FILE": str(tmp_path / "nope.env")})
        assert "TFBOOT_ENV_FILE=" in text and "does not exist" in text

    def test_directory(self, tmp_path: Path) -> None:
        assert "directory" in problem_text({"TFBOOT_ENV_FILE": str(tmp_path)})

    def test_malformed_line(self, tmp_path: Path) -> None:
        path = self.write(tmp_path, "MEMORY_LIMIT_MB=1024\nthis is not an assignment\n")
        text = problem_text({"TFBOOT_ENV_FILE": path})
        assert "line 2" in text and "not KEY=VALUE" in text

    def test_unknown_key(self, tmp_path: Path) -> None:
        path = self.write(tmp_path, "MEMORY_LIMT_MB=1024\n")
        text = problem_text({"TFBOOT_ENV_FILE": path})
        assert "unknown variable(s) MEMORY_LIMT_MB" in text

    def test_key_without_value(self, tmp_path: Path) -> None:
        path = self.write(tmp_path, "MEMORY_GROWTH\n")
        assert "line 1 is not KEY=VALUE" in problem_text({"TFBOOT_ENV_FILE": path})

    def test_not_utf8(self, tmp_path: Path) -> None:
        path = tmp_path / "latin1.env"
        path.write_bytes(b"MEMORY_LIMIT_MB=1\xff\n")
        assert "line 1 is not UTF-8 text" in problem_text({"TFBOOT_ENV_FILE": str(path)})
