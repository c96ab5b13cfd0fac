"""Build the simulated-GPU PluggableDevice plugin (sim.c) for a given Python's TensorFlow.

The plugin is compiled with gcc against the headers and framework library of the
TensorFlow installed for the *target* interpreter, which may differ from the one
running this module (a stable and a nightly venv). The result is cached under
``.cache/simgpu/<hash>/`` in the repository, keyed by the C source and the
TensorFlow installation (its directory, C API headers and framework library), and
written atomically so parallel test workers can build at the same time.

Command line: ``python tests/simgpu/build.py [--python PATH]`` prints the plugin path.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "sim.c"
CACHE = HERE.parent.parent / ".cache" / "simgpu"
FRAMEWORK_LIB = "libtensorflow_framework.so.2"
# Headers whose content defines the ABI the plugin is built against.
ABI_HEADERS = (
    "tensorflow/c/experimental/stream_executor/stream_executor.h",
    "tensorflow/c/kernels.h",
    "tensorflow/c/tf_tensor.h",
    "tensorflow/core/public/version.h",
)

_FIND_TF = """
import importlib.util, json
spec = importlib.util.find_spec("tensorflow")
locations = list(spec.submodule_search_locations or []) if spec else []
print(json.dumps(locations[0] if locations else None))
"""


class BuildError(RuntimeError):
    """The plugin could not be built for the requested interpreter."""


def tensorflow_dir(python: str | os.PathLike[str]) -> Path:
    """The ``tensorflow`` package directory of ``python``, found without importing it."""
    proc = subprocess.run([str(python), "-c", _FIND_TF], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise BuildError(f"{python}: cannot look up tensorflow: {proc.stderr.strip()}")
    location = json.loads(proc.stdout.strip().splitlines()[-1])
    if location is None:
        raise BuildError(f"{python}: tensorflow is not installed")
    return Path(location)


def _cache_key(tf_dir: Path) -> str:
    digest = hashlib.sha256(SOURCE.read_bytes())
    digest.update(str(tf_dir).encode())
    for header in ABI_HEADERS:
        path = tf_dir / "include" / header
        digest.update(header.encode())
        digest.update(path.read_bytes() if path.exists() else b"-")
    lib = (tf_dir / FRAMEWORK_LIB).stat()
    digest.update(f"{lib.st_size}:{lib.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def _compile(tf_dir: Path, output: Path) -> None:
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise BuildError("no C compiler (gcc or cc) on PATH")
    cmd = [
        compiler, "-O2", "-fPIC", "-shared", "-std=c11", "-Wall",
        f"-I{tf_dir / 'include'}", str(SOURCE), "-o", str(output),
        f"-L{tf_dir}", f"-l:{FRAMEWORK_LIB}", f"-Wl,-rpath,{tf_dir}", "-lpthread", "-lrt",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise BuildError(f"compiling {SOURCE.name} failed:\n{proc.stderr}")


def build_plugin(python: str | os.PathLike[str] = sys.executable) -> Path:
    """Return the path of the plugin built for ``python``'s TensorFlow, building it if needed."""
    tf_dir = tensorflow_dir(python)
    if not (tf_dir / "include" / ABI_HEADERS[0]).exists():
        raise BuildError(f"{tf_dir}: no StreamExecutor C API headers in this TensorFlow")
    target = CACHE / _cache_key(tf_dir) / "simgpu.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        _compile(tf_dir, Path(tmp))
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="target interpreter")
    args = parser.parse_args(argv)
    try:
        print(build_plugin(args.python))
    except BuildError as exc:
        print(f"build.py: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
