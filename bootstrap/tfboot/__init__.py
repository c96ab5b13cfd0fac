"""tfboot: make TensorFlow obey the container's GPU and CPU budget from environment variables.

Installed, it applies the environment at ``import tensorflow`` with no change to user code.
Explicit use::

    import tfboot
    tfboot.resolve()          # validated settings, without importing TensorFlow
    tfboot.apply()            # import TensorFlow and apply them (once per process)

Attributes load lazily, and only what ``site`` has already loaded is imported here:
this package is imported at every interpreter start.
"""

__version__ = "0.1.0"
__all__ = ["ConfigError", "Settings", "apply", "last_result", "resolve", "uninstall"]

_LAZY = {
    "ConfigError": "errors",
    "Settings": "settings",
    "resolve": "settings",
    "apply": "apply",
    "last_result": "apply",
}


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
    from ._hook import remove_hooks

    remove_hooks()
