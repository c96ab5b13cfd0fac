"""tfboot: make TensorFlow obey the container's GPU and CPU budget from environment variables.

Installed, it applies the environment at ``import tensorflow`` with no change to user code.
Explicit use::

    import tfboot
    tfboot.resolve()          # validated settings, without importing TensorFlow
    tfboot.apply()            # import TensorFlow and apply them (once per process)

``tfboot.pth`` imports this package at every interpreter start, so importing it only puts
a trampoline on ``sys.meta_path``; the first import of TensorFlow or Keras loads the
real hooks (``tfboot._startup``). Nothing else is imported here, and the public
attributes load lazily.
"""

import sys

__version__ = "0.1.0"
__all__ = ["ConfigError", "Settings", "apply", "last_result", "resolve", "uninstall"]

WATCHED = ("tensorflow", "keras", "tf_keras")
_LAZY = {
    "ConfigError": "errors",
    "Settings": "settings",
    "resolve": "settings",
    "apply": "apply",
    "last_result": "apply",
}


class _Trampoline:
    """Waits for the first import of a watched module, then hands over to the real hooks."""

    def find_spec(self, name: str, path: "object" = None, target: "object" = None) -> "object":
        if name not in WATCHED:
            return None
        from ._startup import activate

        return activate(name)


def __getattr__(name: str) -> "object":
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tfboot' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def uninstall() -> None:
    """Remove tfboot's import hooks from this process (the undo of automatic start-up)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Trampoline)]
    if "tfboot._hook" in sys.modules:
        sys.modules["tfboot._hook"].remove_hooks()


if not any(isinstance(f, _Trampoline) for f in sys.meta_path):
    sys.meta_path.insert(0, _Trampoline())
