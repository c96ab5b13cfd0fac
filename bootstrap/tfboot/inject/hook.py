"""The injected start-up hook: ``tfboot inject`` puts its folder first on a container's
``PYTHONPATH``, where it is the ``sitecustomize`` module (``/tfboot/hook/sitecustomize.py``;
the injector image holds this file under that name). Imported under any other name it does
nothing.

At interpreter start, after ``site`` has processed the image's own site directories, it:

1. puts back the ``PYTHONPATH`` the container would have had without tfboot: Kubernetes
   replaces an image's ``ENV PYTHONPATH`` with the container's, so ``tfboot inject`` records
   the image's value (``/tfboot/env/<container>.pythonpath``, written by an init container
   that runs the app's own image) and names the container in ``TFBOOT_INJECTED``;
2. makes the injected tree (``/tfboot/site``) a site directory, appended after the image's
   own packages (an app's own python-dotenv wins), so ``tfboot.pth`` (``tfboot.start`` on
   3.15) runs as if installed, unless the image already started its own tfboot: that copy
   configures the frameworks and the injected one stands down;
3. runs the image's own ``sitecustomize`` as ``site`` would have, an error in it reported as
   ``site`` reports one (``usercustomize`` is ``site``'s own next step, untouched).

Under an interpreter tfboot does not run on (CPython before 3.10, Python 2, PyPy) it does
steps 1 and 3 only: the image's own ``PYTHONPATH`` and ``sitecustomize`` work as without
injection, and nothing of tfboot's is loaded. So this file parses on Python 2.7 too.

It imports only what ``site`` has loaded, never raises for its own part and never prints.
"""

import io
import os
import sys

CONTAINER = "TFBOOT_INJECTED"  # the container's name, set by tfboot inject
SUPPORTED = (3, 10)  # tfboot's oldest CPython (pyproject.toml's requires-python)


def supported():
    """True under an interpreter tfboot runs on: CPython 3.10 and later."""
    implementation = getattr(sys, "implementation", None)
    name = getattr(implementation, "name", "")
    return name == "cpython" and tuple(sys.version_info[:2]) >= SUPPORTED


def _start():
    hook = os.path.dirname(os.path.abspath(__file__))
    try:
        root = os.path.dirname(hook)
        _restore_pythonpath(root, hook)
        tree = os.path.join(root, "site")
        copy = sys.modules.get("tfboot")
        if copy is None and os.path.isdir(tree) and supported():
            import site

            site.addsitedir(tree)
            copy = sys.modules.get("tfboot")
            if copy is not None:
                copy.STARTED = True  # site set `help` before this ran: tfboot cannot tell
        if copy is not None:
            copy.INJECTED = (hook, tree)  # what `tfboot doctor` names beside the copy that ran
    except Exception:
        pass
    _chain(hook)


def _restore_pythonpath(root, hook):
    """Add the image's own PYTHONPATH entries (recorded at the Pod's start) after the hook.
    The environment is left as it is: a child Python inherits ``TFBOOT_INJECTED`` and
    runs this hook again."""
    container = os.environ.get(CONTAINER, "")
    if not container or "/" in container:
        return
    try:
        record = os.path.join(root, "env", container + ".pythonpath")
        with io.open(record, encoding="utf-8") as f:  # Python 2's open has no encoding
            value = f.read().strip("\n")
    except OSError:
        return
    if not value:
        return
    present = {os.path.abspath(p or os.curdir) for p in sys.path}
    at = next((i + 1 for i, p in enumerate(sys.path) if os.path.abspath(p or os.curdir) == hook), 0)
    for entry in value.split(os.pathsep):
        path = os.path.abspath(entry or os.curdir)
        if path not in present:
            present.add(path)
            sys.path.insert(at, path)
            at += 1


def _chain(hook):
    """Import the image's own ``sitecustomize``, as ``site.execsitecustomize`` does. The
    import of this module ends by reading ``sys.modules["sitecustomize"]``: the image's module
    is left there, else this one."""
    this = sys.modules.pop("sitecustomize", None)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != hook]
    try:
        try:
            import sitecustomize  # noqa: F401  (the image's own, found past this folder)
        except ImportError as exc:
            if getattr(exc, "name", "sitecustomize") != "sitecustomize":
                raise
    except Exception as err:
        if sys.flags.verbose:
            sys.excepthook(*sys.exc_info())
        else:
            sys.stderr.write(
                "Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{}: {}\n".format(
                    err.__class__.__name__, err
                )
            )
    finally:
        if this is not None:
            sys.modules.setdefault("sitecustomize", this)


if __name__ == "sitecustomize":
    _start()
