"""Which framework runs the model, which came along with another, and which loads data.

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

Pure: the import stack, the roles taken so far and Keras's backend are given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .. import FRAMEWORKS

# Each watched module, as messages name its framework (the package's one table).
NAMES = {module: name for module, (_adapter, name) in FRAMEWORKS.items()}
MODEL, ALONG, LOADER = "model", "came along", "loader"


@dataclass(frozen=True)
class Role:
    """What a framework is for in this process."""

    kind: str = MODEL
    why: str = ""  # what it came along with, or why it only loads data

    @property
    def runs_model(self) -> bool:
        return self.kind != ALONG

    @property
    def label(self) -> str:
        return f" ({self.why})" if self.kind == ALONG else ""


RUNS_MODEL = Role()


def decide(framework: str, importing: Sequence[str], backend: Callable[[], str]) -> Role:
    """The role of ``framework`` (jax, torch) at its first import, from the import stack."""
    outer = tuple(importing)
    outer = outer[:-1] if outer[-1:] == (framework,) else outer
    if "tensorflow" in outer:
        return Role(ALONG, "came along with TensorFlow's import")
    if "keras" in outer:
        named = backend()
        if named != framework:
            return Role(ALONG, f"came along with Keras on {NAMES.get(named, named)}")
    return RUNS_MODEL


def tensorflow_role(
    taken: Sequence[str], importing: Sequence[str], backend: Callable[[], str]
) -> Role:
    """TensorFlow's role: the data loader when ``taken`` (frameworks running the model) is
    not empty, or Keras is importing it for another backend; else it runs the model."""
    if taken:
        return Role(LOADER, f"{NAMES[taken[0]]} runs the model; TensorFlow is its data loader")
    if "keras" in importing:
        named = backend()
        if named != "tensorflow" and named in NAMES:  # a backend that takes the model
            return Role(LOADER, f"Keras runs on {NAMES[named]}; TensorFlow is its data loader")
    return RUNS_MODEL
