"""Bad input to every CLI command: one error line naming the input, a non-zero exit, no traceback.

``show``, ``check`` and ``manifests`` run in-process through ``cli.main`` (an escaping
exception fails the test the way a traceback would fail a user); stdin and ``doctor``
run as real processes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support import run_module, scenario_env
from tfboot.cli import main
from tfboot.envfile import MAX_BYTES
from tfboot.kube.documents import MAX_BYTES as MANIFEST_MAX_BYTES

SECRET = "root:$6$Zq1secrethash$Vb4:19000:0:99999:7:::"


def write(data: bytes) -> Callable[[Path], str]:
    def make(tmp: Path) -> str:
        (tmp / "input").write_bytes(data)
        return str(tmp / "input")

    return make


def fifo(tmp: Path) -> str:
    os.mkfifo(tmp / "fifo")
    return str(tmp / "fifo")


def fifo_in_a_folder(tmp: Path) -> str:
    """A folder whose one ``.yaml`` is a FIFO: reading it would block for ever."""
    os.mkfifo(tmp / "x.yaml")
    return str(tmp)


def kustomize_folder(tmp: Path) -> str:
    """A kustomize folder: its files are no whole workloads until rendered."""
    (tmp / "kustomization.yaml").write_text("resources: [job.yaml]\n")
    (tmp / "job.yaml").write_text("kind: Job\n")
    return str(tmp)


def unix_socket(tmp: Path) -> str:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp / "sock"))  # left bound: the file stays a socket for the test
    return str(tmp / "sock")


def symlink_loop(tmp: Path) -> str:
    (tmp / "a").symlink_to(tmp / "b")
    (tmp / "b").symlink_to(tmp / "a")
    return str(tmp / "a")


def huge(limit: int) -> Callable[[Path], str]:
    def make(tmp: Path) -> str:
        with open(tmp / "huge", "wb") as fh:
            fh.truncate(limit + 1)  # sparse: no disk used
        return str(tmp / "huge")

    return make


DEEP_YAML = "".join("  " * i + "a:\n" for i in range(3000)).encode()
BAD_ENV_FILES: dict[str, Callable[[Path], str]] = {
    "non-utf8": write(b"MEMORY_LIMIT_MB=1\n\xff\xfe\n"),
    "binary": write(bytes(range(256)) * 4),
    "huge": huge(MAX_BYTES),
    "directory": str,
    "device": lambda _tmp: "/dev/zero",
    "fifo": fifo,
    "socket": unix_socket,
    "symlink loop": symlink_loop,
    "missing": lambda tmp: str(tmp / "missing.env"),
    "secrets": write(((SECRET + "\n") * 3 + "PASSWORD=hunter2\n").encode()),
    "deep yaml": write(DEEP_YAML),
}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name not in scenario_env():
            monkeypatch.delenv(name)


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize("command", ["show", "check"])
@pytest.mark.parametrize("case", sorted(BAD_ENV_FILES))
def test_bad_env_file(
    command: str, case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = BAD_ENV_FILES[case](tmp_path)
    assert main([command, "--env-file", path]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("tfboot: error: ")
    # One line per problem (two here for "secrets"), each naming the file.
    lines = err.splitlines()[1:] or err.splitlines()
    assert all(f"TFBOOT_ENV_FILE={path!r} is invalid: " in line for line in lines)
    for leaked in ("$6$", "hunter2", "secrethash"):
        assert leaked not in err


@pytest.mark.usefixtures("clean_env")
def test_secret_file_errors_name_lines_and_plausible_keys_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(f"{SECRET}\nPASSWORD=hunter2\n".encode())(tmp_path)
    main(["check", "--env-file", path])
    err = capsys.readouterr().err
    assert "line 1 is not KEY=VALUE" in err
    assert "unknown variable(s) PASSWORD" in err
    assert "hunter2" not in err and "$6$" not in err


def test_empty_env_file_is_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--env-file", write(b"")(tmp_path)]) == 0


BAD_MANIFESTS: dict[str, tuple[Callable[[Path], str], int, str]] = {
    "non-utf8": (write(b"kind: Pod\n\xff\n"), 2, "line 2 is not UTF-8 text"),
    "binary": (write(bytes(range(256)) * 4), 2, "is not UTF-8 text"),
    "empty": (write(b""), 1, "no-workloads"),
    "huge": (huge(MANIFEST_MAX_BYTES), 2, "larger than 32 MiB"),
    "deep yaml": (write(DEEP_YAML), 1, "nested too deeply"),
    "deep json": (write(b"[" * 100000 + b"]" * 100000), 1, "nested too deeply"),
    "scalar": (write(b'"just a string"\n'), 1, "no-workloads"),
    "list of numbers": (write(b"[1, 2, 3]\n"), 1, "no-workloads"),
    "empty directory": (str, 1, "no-workloads"),  # a folder is walked, as kubeconform does
    "device": (lambda _tmp: "/dev/zero", 2, "not a regular file"),
    "fifo": (fifo, 2, "not a regular file (a FIFO, a device, a socket)"),
    "fifo in a folder": (fifo_in_a_folder, 2, "not a regular file"),
    "kustomize folder": (
        kustomize_folder,
        2,
        "is a kustomize folder, whose patches are no "
        "whole workloads; render it first: kubectl kustomize",
    ),
    "symlink loop": (symlink_loop, 2, "Too many levels of symbolic links"),
    "missing": (lambda tmp: str(tmp / "missing.yaml"), 2, "No such file or directory"),
}


@pytest.mark.parametrize("case", sorted(BAD_MANIFESTS))
def test_bad_manifest_input(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make, status, words = BAD_MANIFESTS[case]
    path = make(tmp_path)
    assert main(["manifests", path]) == status
    out, err = capsys.readouterr()
    text = out + err
    assert words in text and path in text


def test_manifests_walks_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its YAML and JSON files, in subfolders too; other and hidden files left out."""
    pod = (
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {}}}\nspec:\n  containers:\n"
        "  - {{name: c, image: 'r.example/i:1', env: [{{name: CPU_THREADS, value: lots}}]}}\n"
    )
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.yaml").write_text(pod.format("a"))
    (tmp_path / "sub" / "b.yml").write_text(pod.format("b"))
    (tmp_path / "notes.txt").write_text("kind: Pod\n")
    (tmp_path / ".hidden.yaml").write_text(pod.format("hidden"))
    assert main(["manifests", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "Pod/a" in out and "Pod/b" in out and "hidden" not in out and "notes" not in out


def test_manifests_on_non_utf8_stdin() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "tfboot", "manifests", "-"],
        env=scenario_env(),
        input=b"\xff\xfe",
        capture_output=True,
        timeout=120,
    )
    assert run.returncode == 2
    assert run.stderr == b"tfboot manifests: cannot read <stdin>: line 1 is not UTF-8 text\n"


@pytest.mark.tf
def test_doctor_with_a_binary_env_file(tmp_path: Path) -> None:
    path = write(bytes(range(256)))(tmp_path)
    run = run_module(["tfboot", "doctor"], {"TFBOOT_ENV_FILE": path}, timeout=300)
    assert run.returncode == 1
    assert "Traceback" not in run.stderr + run.stdout
    (line,) = [x for x in run.stdout.splitlines() if "ERROR" in x]
    assert f"TFBOOT_ENV_FILE={path!r} is invalid: line 2 is not UTF-8 text" in line


@pytest.mark.parametrize(
    ("command", "status"),
    [(["show"], 141), (["check"], 141), (["--help"], 0)],  # argparse ignores it for help
)
def test_a_reader_that_goes_away_ends_quietly(command: list[str], status: int) -> None:
    # `tfboot show | head -1`: here the reader is gone before anything is written.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        run = subprocess.run(
            [sys.executable, "-m", "tfboot", *command],
            env=scenario_env({"MEMORY_LIMIT_MB": "6144"}),
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert (run.returncode, run.stderr) == (status, "")


def test_doctor_without_the_framework_says_so_in_one_line(tmp_path) -> None:
    """An environment without TensorFlow (the package alone on the path, no site-packages,
    so the start-up hook's absence is also said): one error line and exit status 2, no
    traceback; with --json, one object."""
    import json
    import shutil
    import subprocess
    import sys

    import tfboot

    shutil.copytree(Path(tfboot.__file__).parent, tmp_path / "tfboot")
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    for framework in ("tensorflow", "torch", "jax"):
        command = [sys.executable, "-S", "-m", "tfboot", "doctor", "--framework", framework]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and "Traceback" not in done.stdout + done.stderr, done
        assert len(done.stderr.splitlines()) == 1, done.stderr
        assert done.stderr.startswith("tfboot: error: doctor: ") and \
            " is not installed in this environment (" in done.stderr  # fmt: skip
    as_json = subprocess.run([sys.executable, "-S", "-m", "tfboot", "doctor", "--json"], env=env,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    found = json.loads(as_json.stdout.splitlines()[-1])
    assert as_json.returncode == 2 and found["missing"] == ["tensorflow"], as_json
