"""Build the images the container tests and the CPU-quota benchmark run.

No registry is reachable from the machines these tests run on, so the TensorFlow base image
is a local stand-in: a Debian rootfs from ``debootstrap`` imported with ``docker import``,
plus TensorFlow installed from wheels downloaded on the host (``standin/Dockerfile``). Both
are tagged with a hash of their recipe, so a later run finds them with
``docker image inspect`` and builds nothing. The tfboot image is then built from the
project's own ``docker/Dockerfile`` on top of the stand-in.

Run as a script to build (or find) the images and print the tfboot image's tag.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
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
    """Serialise image builds across processes (pytest-xdist workers, a benchmark)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "build.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def digest(*parts: str) -> str:
    """A short stable hash of ``parts``."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class StandInRecipe:
    """Everything the stand-in TensorFlow base image is made from; its hash is the image tag."""

    suite: str = "bookworm"
    mirror: str = "http://deb.debian.org/debian"
    packages: tuple[str, ...] = ("python3", "python3-pip", "python3-venv", "ca-certificates")
    tf_requirement: str = "tensorflow-cpu==2.21.0"
    python_version: str = "3.11"
    glibc: tuple[int, int] = (2, 36)  # bookworm's; wheels up to this manylinux level fit

    @property
    def rootfs_tag(self) -> str:
        key = digest(self.suite, self.mirror, *self.packages)
        return f"{IMAGE_PREFIX}/debian-rootfs:{self.suite}-{key}"

    @property
    def base_tag(self) -> str:
        recipe = json.dumps(asdict(self), sort_keys=True)
        key = digest(recipe, STANDIN_DOCKERFILE.read_text())
        version = self.tf_requirement.rpartition("==")[2] or "latest"
        return f"{IMAGE_PREFIX}/tensorflow-standin:{version}-{key}"

    def platforms(self) -> list[str]:
        """Every manylinux platform tag the target's glibc accepts (pip does not expand them)."""
        major, minor = self.glibc
        tags = [f"manylinux_{major}_{m}_x86_64" for m in range(minor, 4, -1)]
        return [*tags, "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]


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
        log(f"debootstrap {recipe.suite} into {rootfs} (about a minute)")
        run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(recipe.packages)}",
                recipe.suite,
                str(rootfs),
                recipe.mirror,
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
    """Download TensorFlow and its dependencies as wheels for the stand-in's Python."""
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
    recipe = recipe or StandInRecipe()
    tag = recipe.base_tag
    with build_lock():
        if image_exists(tag):
            log(f"stand-in base {tag} is cached")
            return tag
        rootfs_tag = build_rootfs(recipe)
        context = CACHE / f"standin-{tag.rpartition(':')[2]}"
        (context / "wheels").mkdir(parents=True, exist_ok=True)
        download_tf_wheels(recipe, context / "wheels")
        shutil.copy(STANDIN_DOCKERFILE, context / "Dockerfile")
        log(f"docker build {tag} (about two minutes)")
        run(
            [
                "docker", "build", "--tag", tag,
                "--build-arg", f"ROOTFS_IMAGE={rootfs_tag}",
                "--build-arg", f"TF_REQUIREMENT={recipe.tf_requirement}",
                str(context),
            ]
        )  # fmt: skip
        shutil.rmtree(context, ignore_errors=True)
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


def main() -> None:
    """Build (or find) both images and print the tfboot image's tag."""
    print(build_tfboot_image(build_standin_base()))


if __name__ == "__main__":
    main()
