"""Keras 3's backend, read as Keras reads it, for the role of each framework it loads.

Keras decides its backend once, in ``keras/src/backend/config.py`` (Keras 3.15.1). Once
that module has run, tfboot asks it; before, tfboot mirrors its rules:

- the config directory is ``KERAS_HOME`` when the variable is set at all (even empty);
  else ``~/.keras``, or ``/tmp/.keras`` when the home directory is not writable (lines
  277-283, for a read-only root filesystem or a user without a home);
- ``keras.json`` in it is read with ``~`` expanded (line 292); a file that is not JSON
  counts as ``{}`` (lines 293-297); its ``backend`` key wins over the default
  ``tensorflow`` (line 313);
- a non-empty ``KERAS_BACKEND``, taken as it is, wins over the file (lines 354-357).

Keras 2 (``keras`` 2.12 to 2.15, bundled with TensorFlow up to 2.15) runs on TensorFlow
only and reads neither ``KERAS_BACKEND`` nor ``keras.json``'s ``backend``: where the
installed ``keras`` is Keras 2, the backend is TensorFlow, whatever they say.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Mapping

CONFIG_MODULE = "keras.src.backend.config"
DEFAULT_BACKEND = "tensorflow"
KERAS_3 = (3,)  # the first Keras with a backend to choose
MAX_CONFIG_BYTES = 1 << 20  # keras.json is a few lines; a larger file is not read


def _expand(path: str, env: Mapping[str, str]) -> str:
    """``os.path.expanduser`` with ``HOME`` taken from ``env``, as Keras's process sees it."""
    if path == "~" or path.startswith("~/"):
        home = env.get("HOME") or os.path.expanduser("~")
        return home + path[1:]
    return os.path.expanduser(path)


def keras_dir(env: Mapping[str, str]) -> str:
    """Keras's config directory (keras/src/backend/config.py, Keras 3.15.1, lines 277-283)."""
    if "KERAS_HOME" in env:
        return env["KERAS_HOME"]
    base = _expand("~", env)
    if not os.access(base, os.W_OK):
        base = "/tmp"
    return os.path.join(base, ".keras")


def _file_backend(path: str) -> str:
    """``backend`` from ``keras.json``; the default when it is missing or not a JSON object."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_CONFIG_BYTES:
            return DEFAULT_BACKEND  # never block on a FIFO, never read a huge file
        with open(path, encoding="utf-8") as file:
            config = json.load(file)
    except (OSError, ValueError):
        return DEFAULT_BACKEND
    if not isinstance(config, dict):
        return DEFAULT_BACKEND
    return str(config.get("backend") or DEFAULT_BACKEND)


def keras_backend(env: Mapping[str, str], modules: Mapping[str, object] = sys.modules) -> str:
    """The backend Keras runs on: Keras's own answer once it has decided, else its rules."""
    decided = getattr(modules.get(CONFIG_MODULE), "_BACKEND", None)
    if isinstance(decided, str) and decided:
        return decided
    from .versions import installed

    version = installed("keras")
    if version is not None and version < KERAS_3:
        return DEFAULT_BACKEND  # Keras 2: TensorFlow's only
    named = env.get("KERAS_BACKEND")
    if named:
        return named
    return _file_backend(_expand(os.path.join(keras_dir(env), "keras.json"), env))
