"""Build the images the container tests and the CPU-quota benchmark run.

No registry is reachable from the machines these tests run on, so each TensorFlow base image
is a local stand-in: a Debian rootfs from ``debootstrap`` imported with ``docker import``,
plus TensorFlow installed from wheels downloaded on the host (``standin/Dockerfile``). Both
are tagged with a hash of their recipe, so a later run finds them with
``docker image inspect`` and builds nothing. The tfboot image is then built from the
project's own ``docker/Dockerfile`` on top of the stand-in.

There is one stand-in per CPython an image may carry (``STANDINS``): 3.11 from bookworm (the
default), 3.13 from trixie, 3.14 and 3.15 from sid, which share one rootfs. No TensorFlow
exists for 3.15, so its stand-in has none; its tests bring a stand-in ``tensorflow`` package.

Run as a script to build (or find) the default images and print the tfboot image's tag;
``--all`` builds every stand-in and its tfboot image (``scripts/test.sh`` runs that in the
background while the other tests run).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "docker"
STANDIN_DOCKERFILE = Path(__file__).resolve().parent / "standin" / "Dockerfile"
PROJECT_DOCKER_DIR = REPO / "docker"
IMAGE_PREFIX = "tfboot-test"


def log(message: str) -> None:
    """Progress on stderr (shown by pytest with ``-s`` and in failure reports)."""
    print(f"[images] {message}", file=sys.stderr, flush=True)


def run(
    cmd: Sequence[str],
    *,
    stdin: IO[bytes] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 1800,
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``, failing with its output when it exits non-zero or overruns ``timeout``."""
    started = time.monotonic()
    proc = subprocess.run(
        list(cmd), stdin=stdin, env=env, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"command failed ({proc.returncode}): {' '.join(cmd)}\n"
            f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
        )
    log(f"{' '.join(cmd[:3])} ... done in {time.monotonic() - started:.0f}s")
    return proc


def image_exists(tag: str) -> bool:
    """Whether the engine has an image called ``tag``."""
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0


@contextlib.contextmanager
def build_lock() -> Iterator[None]:
    """Serialise image builds across processes (pytest-xdist workers, a benchmark). A
    process that must wait says so on the terminal at once and each minute after (a
    pytest worker's own stderr is captured; the process's original one is the terminal's)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "build.lock", "w") as fh:
        started = time.monotonic()
        said = None
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = time.monotonic() - started
                if said is None or waited - said >= 60:
                    said = waited
                    print(f"[images] waiting {waited:.0f} s for an image build in another "
                          f"process (its log: {CACHE / 'prebuild.log'})",
                          file=sys.__stderr__ or sys.stderr, flush=True)  # fmt: skip
                time.sleep(1)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def digest(*parts: str) -> str:
    """A short stable hash of ``parts``."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class StandInRecipe:
    """Everything a stand-in TensorFlow base image is made from; its hash is the image tag."""

    python_version: str = "3.11"
    suite: str = "bookworm"
    packages: tuple[str, ...] = ("python3", "python3-pip", "python3-venv", "ca-certificates")
    # None where no TensorFlow exists for this Python.
    tf_requirement: str | None = "tensorflow-cpu==2.21.0"
    glibc: tuple[int, int] = (2, 36)  # the suite's; wheels up to this manylinux level fit

    @property
    def rootfs_tag(self) -> str:
        key = digest(self.suite, *self.packages)
        return f"{IMAGE_PREFIX}/debian-rootfs:{self.suite}-{key}"

    @property
    def base_tag(self) -> str:
        recipe = json.dumps(asdict(self), sort_keys=True)
        key = digest(recipe, STANDIN_DOCKERFILE.read_text())
        tf = (self.tf_requirement or "").rpartition("==")[2] or "none"
        return f"{IMAGE_PREFIX}/tensorflow-standin:py{self.python_version}-tf{tf}-{key}"

    def platforms(self) -> list[str]:
        """Every manylinux platform tag the target's glibc accepts (pip does not expand them)."""
        major, minor = self.glibc
        tags = [f"manylinux_{major}_{m}_x86_64" for m in range(minor, 4, -1)]
        return [*tags, "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]


# sid carries both 3.14 and 3.15; one rootfs with both serves the two stand-ins.
SID_PACKAGES = (
    "python3", "python3-pip", "python3-venv", "python3.14", "python3.15", "python3.15-venv",
    "ca-certificates",
)  # fmt: skip
STANDINS = {
    "3.11": StandInRecipe(),
    "3.13": StandInRecipe("3.13", "trixie", glibc=(2, 41)),
    "3.14": StandInRecipe("3.14", "sid", SID_PACKAGES, "tensorflow-cpu==2.22.0rc0", (2, 43)),
    "3.15": StandInRecipe("3.15", "sid", SID_PACKAGES, None, (2, 43)),
}
DEFAULT_PYTHON = "3.11"
# PyTorch on Python 3.14, whose default start method is forkserver: Debian's own CPU build
# (python3-torch, 2.14 in testing), since PyPI's 3.14 wheel is the CUDA build and needs
# CUDA's libraries to import. From testing, not sid: a package migrates there only when it
# installs, and python3-torch pulls in many. Its own rootfs, no TensorFlow: the DataLoader's
# tests run on it.
TORCH_STANDIN = StandInRecipe("3.14", "testing", (*SID_PACKAGES[:4], "python3-torch",
                                                 "ca-certificates"), None, (2, 43))  # fmt: skip


def debian_mirror() -> str | None:
    """The Debian mirror this machine's apt uses, or None to leave it to debootstrap.

    Read from the ``URIs:`` of a deb822 ``/etc/apt/sources.list.d/*.sources`` stanza, or a
    ``deb`` line of ``/etc/apt/sources.list``, whose suite is a release (not ``-security`` or
    ``-updates``).
    """
    for path in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for stanza in re.split(r"\n\s*\n", _read(path)):
            fields = dict(re.findall(r"^([\w-]+):[ \t]*(.*)$", stanza, re.MULTILINE))
            uris = fields.get("URIs", "").split()
            if (
                uris
                and "deb" in fields.get("Types", "").split()
                and _release(fields.get("Suites", ""))
            ):
                return uris[0]
    for line in _read(Path("/etc/apt/sources.list")).splitlines():
        words = re.sub(r"\[[^]]*\]", "", line).split()
        if len(words) >= 3 and words[0] == "deb" and _release(words[2]):
            return words[1]
    return None


def _release(suites: str) -> bool:
    return any("-" not in suite for suite in suites.split())


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def build_rootfs(recipe: StandInRecipe) -> str:
    """``debootstrap`` a minimal Debian and ``docker import`` it; returns the image tag."""
    tag = recipe.rootfs_tag
    if image_exists(tag):
        return tag
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is not installed (scripts/ensure-docker.sh installs it)")
    CACHE.mkdir(parents=True, exist_ok=True)
    rootfs = Path(tempfile.mkdtemp(prefix="rootfs-", dir=CACHE))
    try:
        mirror = debian_mirror()
        log(f"debootstrap {recipe.suite} into {rootfs} from {mirror or 'the default'}")
        run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(recipe.packages)}",
                recipe.suite,
                str(rootfs),
                *([mirror] if mirror else []),
            ]
        )
        for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for item in (rootfs / leftover).glob("*"):
                if item.is_file():
                    item.unlink()
        log(f"docker import as {tag}")
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        try:
            run(["docker", "import", "--change", 'CMD ["python3"]', "-", tag], stdin=tar.stdout)
        finally:
            assert tar.stdout is not None
            tar.stdout.close()
            if tar.wait() != 0:
                raise RuntimeError("tar of the rootfs failed")
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
    return tag


def download_tf_wheels(recipe: StandInRecipe, dest: Path) -> None:
    """Download TensorFlow and its dependencies as wheels for the stand-in's Python.

    pip's own cache on the host keeps every file it fetched, so wheels shared between the
    stand-ins (the pure-Python dependencies) and later rebuilds are not downloaded again.
    """
    assert recipe.tf_requirement is not None
    cmd = [
        sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
        "--python-version", recipe.python_version, "--implementation", "cp",
        "--dest", str(dest),
    ]  # fmt: skip
    for platform in recipe.platforms():
        cmd += ["--platform", platform]
    log(f"pip download {recipe.tf_requirement} into {dest}")
    run([*cmd, recipe.tf_requirement])


def build_standin_base(recipe: StandInRecipe | None = None) -> str:
    """The stand-in TensorFlow base image's tag, building it only when it is missing."""
    recipe = recipe or STANDINS[DEFAULT_PYTHON]
    tag = recipe.base_tag
    with build_lock():
        if image_exists(tag):
            log(f"stand-in base {tag} is cached")
            return tag
        started = time.monotonic()
        rootfs_tag = build_rootfs(recipe)
        context = CACHE / f"standin-{tag.rpartition(':')[2]}"
        (context / "wheels").mkdir(parents=True, exist_ok=True)
        if recipe.tf_requirement is not None:
            download_tf_wheels(recipe, context / "wheels")
        shutil.copy(STANDIN_DOCKERFILE, context / "Dockerfile")
        log(f"docker build {tag}")
        run(
            [
                "docker", "build", "--tag", tag,
                "--build-arg", f"ROOTFS_IMAGE={rootfs_tag}",
                "--build-arg", f"PYTHON_VERSION={recipe.python_version}",
                "--build-arg", f"TF_REQUIREMENT={recipe.tf_requirement or ''}",
                str(context),
            ]
        )  # fmt: skip
        shutil.rmtree(context, ignore_errors=True)
        log(f"stand-in base {tag} built in {time.monotonic() - started:.0f}s")
    return tag


def build_tfboot_image(base_tag: str, tag: str | None = None) -> str:
    """Build the project's ``docker/Dockerfile`` on ``base_tag`` with a freshly built wheel."""
    tag = tag or f"{IMAGE_PREFIX}/tfboot:{base_tag.rpartition(':')[2]}"
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tfboot-ctx-", dir=CACHE) as tmp:
        context = Path(tmp)
        for name in ("Dockerfile", "check_install.py"):
            shutil.copy(PROJECT_DOCKER_DIR / name, context / name)
        run(
            [str(PROJECT_DOCKER_DIR / "prepare-wheels.sh"), str(context / "wheels")],
            env={**os.environ, "PYTHON": sys.executable},
        )
        with build_lock():
            log(f"docker build {tag} on {base_tag}")
            run(["docker", "build", "--tag", tag, "--build-arg", f"BASE_IMAGE={base_tag}", tmp])
    return tag


def build_all() -> dict[str, str]:
    """Build (or find) every stand-in and its tfboot image; map each Python to its image
    (``3.14-torch``: PyTorch's)."""
    recipes = {**STANDINS, "3.14-torch": TORCH_STANDIN}
    return {py: build_tfboot_image(build_standin_base(r)) for py, r in recipes.items()}


def main() -> None:
    """Build (or find) the default images and print the tfboot image's tag (``--all``: all)."""
    if sys.argv[1:] == ["--all"]:
        for python, tag in build_all().items():
            print(python, tag)
    else:
        print(build_tfboot_image(build_standin_base()))


if __name__ == "__main__":
    main()
