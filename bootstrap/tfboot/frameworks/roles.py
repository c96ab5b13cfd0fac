"""Which framework runs the model, and which came along with another: the GPU owner rule.

Frameworks import one another. TensorFlow's own import loads JAX when it is installed
(``tensorflow.lite``); Keras loads JAX for its Orbax callback whatever its backend; Keras
on JAX or PyTorch loads TensorFlow later, for ``tf.data``. At each framework's first import:

- JAX or PyTorch imported while TensorFlow is importing, or while Keras is importing on
  another backend, *came along*. It gets the device budget (nothing happens until it is
  used), its plan is logged at debug level, and variables it cannot apply are not refused.
- Otherwise JAX or PyTorch *runs the model*: it gets the budget, and a variable it cannot
  apply is refused.
- TensorFlow imported after JAX or PyTorch took the model (directly or as Keras's backend),
  or by Keras on another backend, is the *data loader*: it sees no GPU, so it takes no GPU
  memory, unless ``LOADER_GPU=true``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .. import _hook
from . import NAMES

# framework -> its role, recorded at its first import in this process
_roles: dict[str, Role] = {}


@dataclass(frozen=True)
class Role:
    """What a framework is for in this process."""

    runs_model: bool
    why: str  # "" when it runs the model; else what it came along with, for the log

    @property
    def label(self) -> str:
        return "" if self.runs_model else f" ({self.why})"


def keras_backend(env: Mapping[str, str]) -> str:
    """Keras's backend as Keras picks it: ``KERAS_BACKEND``, then keras.json, else tensorflow."""
    named = env.get("KERAS_BACKEND", "").strip()
    if named:
        return named
    home = env.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        config = json.loads(Path(home, "keras.json").read_text(encoding="utf-8"))
        return str(config.get("backend") or "tensorflow")
    except (OSError, ValueError, AttributeError):
        return "tensorflow"


def role(framework: str, env: Mapping[str, str]) -> Role:
    """The role of ``framework`` ("jax" or "torch"), decided at its first import."""
    if framework in _roles:
        return _roles[framework]
    stack = _hook.importing()
    outer = stack[:-1] if stack[-1:] == (framework,) else stack
    decided = Role(True, "")
    if "tensorflow" in outer:
        decided = Role(False, "came along with TensorFlow's import")
    elif "keras" in outer:
        backend = keras_backend(env)
        if backend != framework:
            decided = Role(False, f"came along with Keras on {NAMES.get(backend, backend)}")
    _roles[framework] = decided
    return decided


def tensorflow_is_loader(env: Mapping[str, str]) -> str | None:
    """Why TensorFlow is another framework's data loader, or None when it runs the model."""
    taken = [f for f, r in _roles.items() if r.runs_model and f in sys.modules]
    if taken:
        return f"{NAMES[taken[0]]} runs the model; TensorFlow is its data loader"
    if "keras" in _hook.importing():
        backend = keras_backend(env)
        if backend in ("jax", "torch"):
            return f"Keras runs on {NAMES[backend]}; TensorFlow is its data loader"
    return None


def roles() -> dict[str, Role]:
    """The roles recorded so far (for doctor)."""
    return dict(_roles)
