"""Which framework a container will run, as far as its spec says: for the headroom below a share.

Offline the framework is not imported, so it is read from what the spec names, first match:
``KERAS_BACKEND`` (Keras 3 runs on that framework), then the command and arguments
(``torchrun``, ``python -m torch.distributed.run`` or ``.launch``: PyTorch), then the
image's name (``pytorch``, ``torch``, ``jax``, ``tensorflow`` in its last path part). None
when nothing says: the checker then judges by TensorFlow's headroom, the largest, and says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..budget.roles import NAMES
from ..frameworks import PLANNED


def _words(module: str) -> tuple[str, ...]:
    """How a spec names a framework: its name and its module, in lower case (pytorch, torch)."""
    return tuple(dict.fromkeys((NAMES[module].lower(), module)))


# The frameworks as the checker goes through them, the table's later rows first: TensorFlow,
# its first and the one assumed where nothing is named, last (an image's words; the
# headroom each of the others keeps, in messages: "PyTorch and JAX need 1024 MiB").
ORDER = tuple(reversed(PLANNED))
# KERAS_BACKEND's word -> the framework Keras 3 then runs on (jax, torch or pytorch, ...)
BACKENDS = {word: module for module in ORDER for word in _words(module)}
TORCHRUN = ("torchrun", "torch.distributed.run", "torch.distributed.launch")
IMAGE_WORDS = tuple((word, module) for module in ORDER for word in _words(module))


def framework_of(spec: Mapping[str, Any], env: Mapping[str, str]) -> tuple[str, str] | None:
    """(module, why) of the framework the container ``spec`` with ``env`` runs, or None."""
    backend = env.get("KERAS_BACKEND", "").strip().lower()
    if backend in BACKENDS:
        return BACKENDS[backend], f"KERAS_BACKEND={backend}"
    words = [str(w) for key in ("command", "args") for w in spec.get(key) or [] if w is not None]
    for word in words:
        for part in word.split():
            if part.rpartition("/")[2] in TORCHRUN:
                return "torch", f"its command runs {part.rpartition('/')[2]}"
    image = str(spec.get("image") or "")
    name = image.rpartition("/")[2].partition("@")[0].partition(":")[0].lower()
    for word, module in IMAGE_WORDS:
        if word in name:
            return module, f"its image {image}"
    return None


def judged(found: tuple[str, str] | None) -> str:
    """How a share was judged, for a message: the framework and why, or the assumption."""
    if found is None:
        return (
            "judged for TensorFlow, whose headroom is the largest: the container names no "
            "framework (KERAS_BACKEND, a torchrun command, its image)"
        )
    return f"judged for {NAMES[found[0]]}: {found[1]}"
