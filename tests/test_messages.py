"""What a message may quote (``tfboot.values``): planted secrets never come back.

A secret is planted where tfboot reads but must never quote: as the value of every
variable in a ``.env`` file, as a line that is not ``KEY=VALUE`` (a pasted token), as a key
that is not a name, through a ``${VAR}`` interpolation from the environment, and in an
unrelated environment variable. Every error path is then taken (resolving, the cluster
builder, the command line's ``check``, ``show`` and JSON output) and the secret must
appear in none of the output.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import run_module
from tfboot import ConfigError, resolve
from tfboot.cli import main
from tfboot.settings import FILE_NAMES

SECRET = "AKIAZ7SECRETPLANTED42"
UNRELATED = {"AWS_SECRET_ACCESS_KEY": SECRET, "PLANTED": SECRET}
# Every variable a .env may set needs DISTRIBUTED to be read at all (the DIST_* ones).
LINES = [f"{name}={SECRET}" for name in sorted(FILE_NAMES)] + [
    f"{name}=${{PLANTED}}" for name in sorted(FILE_NAMES)
]
FILES = {
    **{line: f"DISTRIBUTED=k8s\n{line}\n" for line in LINES},
    "pasted token": f"VIRTUAL_SPLIT=2\n{SECRET}\n",
    "key that is no name": f"VIRTUAL_SPLIT=2\n{SECRET}-x=1\n",
    "quoted, unterminated": f'VIRTUAL_SPLIT="{SECRET}\n',
    "export": f"export MEMORY_LIMIT_MB='{SECRET}'\n",
    "default": "MEMORY_LIMIT_MB=${MISSING:-" + SECRET + "}\n",
}


def env_file(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "tfboot.env"
    path.write_text(text)
    return {"TFBOOT_ENV_FILE": str(path), **UNRELATED}


@pytest.mark.parametrize("name", sorted(FILES))
def test_resolving_never_quotes_a_planted_secret(tmp_path: Path, name: str) -> None:
    env = env_file(tmp_path, FILES[name])
    with pytest.raises(ConfigError) as info:
        settings = resolve(env)
        if settings.cluster is not None:  # DIST_* that parsed: the builder's errors
            from tfboot.adapters.tensorflow import LAUNCH
            from tfboot.cluster.plan import plan_cluster

            plan_cluster(LAUNCH, "TensorFlow", settings.distributed, settings.cluster, env, {})
    assert SECRET not in str(info.value), str(info.value)


@pytest.mark.parametrize("command", [["check"], ["check", "--json"], ["show"], ["show", "--json"]])
@pytest.mark.parametrize(
    "name", ["pasted token", "MEMORY_LIMIT_MB=${PLANTED}", "DIST_HOSTS=" + SECRET]
)
def test_the_command_line_never_prints_a_planted_secret(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    name: str,
) -> None:
    for key, value in env_file(tmp_path, FILES[name]).items():
        monkeypatch.setenv(key, value)
    assert main(command) == 1
    out, err = capsys.readouterr()
    assert SECRET not in out + err, out + err
    if "--json" in command:
        assert json.loads(out)["ok"] is False


@pytest.mark.tf
@pytest.mark.parametrize("on_error", ["raise", "warn"])
def test_import_tensorflow_never_prints_a_planted_secret(tmp_path: Path, on_error: str) -> None:
    env = {**env_file(tmp_path, FILES["MEMORY_LIMIT_MB=${PLANTED}"]), "TFBOOT_ON_ERROR": on_error}
    result = run_module(["tfboot", "doctor", "--json"], env, timeout=300)
    assert result.returncode == 1
    assert SECRET not in result.stdout + result.stderr
    assert "MEMORY_LIMIT_MB: the value on line 2 of" in result.stdout


def test_a_value_given_in_the_environment_is_quoted() -> None:
    """The other half of the rule: what the user wrote in plain sight is named with its value."""
    with pytest.raises(ConfigError, match="MEMORY_LIMIT_MB='lots' is invalid"):
        resolve({"MEMORY_LIMIT_MB": "lots"})


def test_the_errors_the_docs_quote_are_the_ones_printed() -> None:
    """Each ``NAME='value' is invalid: ...`` line the README, docs/ and docker/README.md quote
    is, word for word, what ``resolve`` says for that value."""
    import re
    from pathlib import Path

    from tfboot import ConfigError, resolve

    root = Path(__file__).resolve().parent.parent
    quoted = []
    for path in [root / "README.md", root / "docker" / "README.md", *(root / "docs").glob("*.md")]:
        quoted += re.findall(r"([A-Z_]+)='([^']*)' is invalid: ([^\n`]*)", path.read_text())
    assert quoted, "no quoted error found"
    for name, value, words in quoted:
        try:
            resolve({name: value})
        except ConfigError as exc:
            assert str(exc) == f"{name}={value!r} is invalid: {words}", (name, value)
        else:
            raise AssertionError(f"{name}={value!r} is accepted, yet the docs quote an error")
