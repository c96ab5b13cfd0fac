"""The injected start-up hook (``tfboot/inject/hook.py``, installed as ``sitecustomize``) on
every CPython here from 3.10, each a bare interpreter with no tfboot installed: the tree,
read-only, made as the injector image holds it. It starts tfboot (the tree appended after
the interpreter's own packages), runs the image's own ``sitecustomize`` as ``site`` would
(an error in it reported exactly as without the hook), reaches ``spawn`` children, prints
nothing, and stands down for a tfboot the interpreter already has.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tfboot
from support import REPO, scenario_env, unavailable

PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
FACTS = """
import json, sys, multiprocessing as mp

def facts():
    t = sys.modules.get("tfboot")
    return {"tfboot": getattr(t, "__file__", None), "started": getattr(t, "STARTED", None),
            "injected": list(getattr(t, "INJECTED", ()) or ()),
            "image_hook": getattr(sys, "image_hook_ran", False),
            "user_hook": getattr(sys, "user_hook_ran", False),
            "python": list(sys.version_info[:2]), "last": sys.path[-1]}

if __name__ == "__main__":
    with mp.get_context("spawn").Pool(1) as pool:
        child = pool.apply(facts)
    print(json.dumps({**facts(), "child": child}))
"""


def bare_pythons() -> list[str]:
    """pyenv's CPythons 3.10 to 3.15 (none with tfboot installed)."""
    found = sorted(PYENV.glob("3.1[0-5].*/bin/python3"))
    return [str(p) for p in found]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``/tfboot`` as the injector image holds it (``docker/inject/build.sh --tree``),
    read-only."""
    root = tmp_path_factory.mktemp("inject") / "tfboot"
    subprocess.run(["bash", str(REPO / "docker" / "inject" / "build.sh"), "--tree", str(root)],
                   env={**os.environ, "PYTHON": sys.executable}, check=True,
                   capture_output=True)  # fmt: skip
    for path in [root, *root.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    return root


@pytest.fixture(scope="module")
def image_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image's own ``sitecustomize`` (``lib``) and ``usercustomize`` (``user``, its
    user base, for every minor version)."""
    lib = tmp_path_factory.mktemp("image-lib")
    (lib / "sitecustomize.py").write_text("import sys\nsys.image_hook_ran = True\n")
    for minor in range(10, 16):
        user = lib / "user" / "lib" / f"python3.{minor}" / "site-packages"
        user.mkdir(parents=True)
        (user / "usercustomize.py").write_text("import sys\nsys.user_hook_ran = True\n")
    return lib


def run(
    python: str, args: list[str], pythonpath: str, cwd: Path, user: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = scenario_env({"PYTHONPATH": pythonpath, "PYTHONDONTWRITEBYTECODE": "1"})
    if user is not None:
        env["PYTHONUSERBASE"] = str(user)
        env.pop("PYTHONNOUSERSITE", None)
    return subprocess.run([python, *args], env=env, cwd=cwd, text=True, capture_output=True,
                          timeout=120)  # fmt: skip


def test_there_is_a_python_3_10() -> None:
    if not any("/3.10." in p for p in bare_pythons()):
        unavailable(f"no CPython 3.10 under {PYENV}")


@pytest.mark.parametrize("python", bare_pythons(), ids=lambda p: Path(p).parents[1].name)
def test_the_hook_starts_tfboot_and_chains_the_image_s_own(
    python: str, tree: Path, image_lib: Path, tmp_path: Path
) -> None:
    script = tmp_path / "facts.py"
    script.write_text(FACTS)
    done = run(python, [str(script)], f"{tree / 'hook'}:{image_lib}", tmp_path, image_lib / "user")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    found = json.loads(done.stdout)
    for seen in (found, found["child"]):
        assert seen["tfboot"] == str(tree / "site" / "tfboot" / "__init__.py"), seen
        assert seen["started"] is True and seen["image_hook"] is True, seen
        assert seen["user_hook"] is True, seen  # site's own next step, untouched
        assert seen["injected"] == [str(tree / "hook"), str(tree / "site")], seen
        assert seen["last"] == str(tree / "site"), seen  # after the interpreter's own packages


@pytest.mark.parametrize("python", bare_pythons()[:1] + bare_pythons()[-1:])
def test_an_error_in_the_image_s_sitecustomize_reads_as_without_the_hook(
    python: str, tree: Path, tmp_path: Path
) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "sitecustomize.py").write_text("raise ValueError('the image is broken')\n")
    code = ["-c", "print('ran')"]
    with_hook = run(python, code, f"{tree / 'hook'}:{lib}", tmp_path)
    without = run(python, code, str(lib), tmp_path)
    assert (with_hook.returncode, with_hook.stdout, with_hook.stderr) == (
        without.returncode, without.stdout, without.stderr)  # fmt: skip
    assert "Error in sitecustomize" in without.stderr


def test_an_installed_tfboot_keeps_its_copy(tree: Path, tmp_path: Path) -> None:
    """This environment has tfboot installed: its copy runs, the injected one stands down."""
    code = ["-c", "import sys, json; t = sys.modules['tfboot']; print(json.dumps("
            "[t.__file__, list(t.INJECTED), str(sys.path[-1])]))"]  # fmt: skip
    done = run(sys.executable, code, str(tree / "hook"), tmp_path)
    assert done.returncode == 0, done.stderr
    path, injected, last = json.loads(done.stdout)
    assert path == tfboot.__file__ and injected == [str(tree / "hook"), str(tree / "site")]
    assert last != str(tree / "site")  # the tree was not even added
    doctor = run(sys.executable, ["-m", "tfboot", "doctor", "--framework", "jax"],
                 str(tree / "hook"), tmp_path)  # fmt: skip
    assert "the image's own tfboot; the injected copy stood down" in doctor.stdout, doctor


# Interpreters tfboot does not run on: the hook stands aside (issue: a 3.9 image's
# `import tensorflow` failed inside tfboot's modules; Python 2.7 printed "'import
# sitecustomize' failed" at every start). Real CPythons 3.9 and 2.7 from pyenv.
OLD = """
import json, sys
t = sys.modules.get("tfboot")
print(json.dumps({"tfboot": t is not None, "hooked": any(f is t for f in sys.meta_path),
                  "image_hook": getattr(sys, "image_hook_ran", False),
                  "image_path": any(p.endswith("image-path") for p in sys.path)}))
"""


def old_pythons() -> list[str]:
    """pyenv's CPython 3.9 and 2.7, which tfboot does not run on."""
    found = sorted(PYENV.glob("3.9.*/bin/python3")) + sorted(PYENV.glob("2.7.*/bin/python2"))
    return [str(p) for p in found]


def test_there_are_old_pythons() -> None:
    if len(old_pythons()) < 2:
        unavailable(f"no CPython 3.9 and 2.7 under {PYENV}")


@pytest.mark.parametrize("python", old_pythons(), ids=lambda p: Path(p).parents[1].name)
def test_the_hook_stands_aside_under_an_old_python(
    python: str, tree: Path, image_lib: Path, tmp_path: Path
) -> None:
    """The image's own PYTHONPATH entries and sitecustomize work as without injection; no
    tfboot module is loaded and no line is printed."""
    (tmp_path / "env").mkdir()
    image_path = tmp_path / "image-path"
    image_path.mkdir()
    script = tmp_path / "facts.py"
    script.write_text(OLD)
    # The record of the image's PYTHONPATH, as inject's init container writes it.
    root = tmp_path / "root"
    (root / "env").mkdir(parents=True)
    (root / "hook").symlink_to(tree / "hook")
    (root / "site").symlink_to(tree / "site")
    (root / "env" / "app.pythonpath").write_text(f"{image_lib}:{image_path}\n")
    env = scenario_env({"PYTHONPATH": str(root / "hook"), "TFBOOT_INJECTED": "app",
                        "PYTHONDONTWRITEBYTECODE": "1"})  # fmt: skip
    injected = subprocess.run([python, str(script)], env=env, text=True, capture_output=True,
                              timeout=60)  # fmt: skip
    plain = run(python, [str(script)], f"{image_lib}:{image_path}", tmp_path)
    assert (injected.returncode, injected.stderr) == (0, ""), injected.stderr
    assert injected.stdout == plain.stdout
    assert json.loads(injected.stdout) == {
        "tfboot": False, "hooked": False, "image_hook": True, "image_path": True}  # fmt: skip


@pytest.mark.parametrize("python", old_pythons() + bare_pythons()[:1])
def test_the_pth_way_adds_the_tree_only_where_tfboot_runs(
    python: str, tree: Path, tmp_path: Path
) -> None:
    """``tfboot-inject.pth`` (mounted into an image's site-packages) parses on every Python
    and adds the tree only under CPython 3.10 and later."""
    site_dir = tmp_path / "site-packages"
    site_dir.mkdir()
    (site_dir / "tfboot-inject.pth").write_text((tree / "tfboot-inject.pth").read_text())
    code = (
        f"import site, sys; site.addsitedir({str(site_dir)!r}); print('/tfboot/site' in sys.path)"
    )
    done = run(python, ["-c", code], "", tmp_path)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    modern = "/3.1" in python
    assert done.stdout.strip() == str(modern), done.stdout


@pytest.fixture(scope="module", params=["0.15.0", "1.2.1"])
def image_dotenv(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An image's own python-dotenv, old (0.15: no ``dotenv.variables``) or new, installed
    from the index as an image would have it."""
    target = tmp_path_factory.mktemp(f"dotenv-{request.param}")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(target), f"python-dotenv=={request.param}"], check=True,
                   capture_output=True)  # fmt: skip
    return target


ENV_FILE = """
import json, sys, dotenv
import tfboot
settings = tfboot.resolve()
print(json.dumps([settings.memory_limit_mb, dotenv.__file__]))
"""


def test_the_images_own_python_dotenv_never_breaks_tfboot(
    tree: Path, image_dotenv: Path, tmp_path: Path
) -> None:
    """``TFBOOT_ENV_FILE`` is read with the tree's python-dotenv; the app's ``import dotenv``
    still gets the image's own."""
    env_file = tmp_path / "tfboot.env"
    env_file.write_text("MEMORY_LIMIT_MB=2048\n")
    python = bare_pythons()[0]
    path = f"{tree / 'hook'}:{image_dotenv}"
    env = scenario_env({"PYTHONPATH": path, "TFBOOT_ENV_FILE": str(env_file),
                        "PYTHONDONTWRITEBYTECODE": "1"})  # fmt: skip
    done = subprocess.run([python, "-c", ENV_FILE], env=env, text=True, capture_output=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    limit, used = json.loads(done.stdout)
    assert limit == 2048 and used == str(image_dotenv / "dotenv" / "__init__.py")


TRIMMED = """
import json, os, subprocess, sys
env = {"PYTHONPATH": os.environ["PYTHONPATH"]}  # a trimmed environment: PYTHONPATH only
code = "import json, os, imagemod; print(json.dumps(os.environ['PYTHONPATH']))"
child = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
print(json.dumps([os.environ["PYTHONPATH"], child.returncode, child.stdout, child.stderr,
                  again.returncode, again.stdout]))
"""


def test_a_child_with_a_trimmed_environment_keeps_the_image_s_pythonpath(
    tree: Path, tmp_path: Path
) -> None:
    """Issue: a child given only ``PYTHONPATH`` could not import the image's modules (the
    entries lived only in tfboot's record). The hook writes them after itself in
    ``PYTHONPATH``; a child that inherits ``TFBOOT_INJECTED`` too adds nothing twice."""
    image_path = tmp_path / "image-path"
    image_path.mkdir()
    (image_path / "imagemod.py").write_text("")
    root = tmp_path / "root"
    (root / "env").mkdir(parents=True)
    (root / "hook").symlink_to(tree / "hook")
    (root / "site").symlink_to(tree / "site")
    (root / "env" / "app.pythonpath").write_text(f"{image_path}\n")
    hook = str(root / "hook")
    env = scenario_env({"PYTHONPATH": f"{hook}:/srv/extra", "TFBOOT_INJECTED": "app",
                        "PYTHONDONTWRITEBYTECODE": "1"})  # fmt: skip
    done = subprocess.run([bare_pythons()[0], "-c", TRIMMED], env=env, text=True,
                          capture_output=True, timeout=120)  # fmt: skip
    assert done.returncode == 0 and done.stderr == "", done.stderr
    mine, status, child, err, again_status, again = json.loads(done.stdout)
    expected = f"{hook}:{image_path}:/srv/extra"
    assert mine == expected
    assert (status, err) == (0, "") and json.loads(child) == expected, err
    assert again_status == 0 and json.loads(again) == expected  # not added twice


def test_the_tree_s_pth_is_what_the_hook_runs(tree: Path) -> None:
    """The hook imports tfboot itself instead of reading the tree's ``tfboot.pth``: the two
    must say the same."""
    assert (tree / "site" / "tfboot.pth").read_text().split() == ["import", "tfboot"]
