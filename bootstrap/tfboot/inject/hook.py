"""The injected start-up hook: ``tfboot inject`` puts its folder first on a container's
``PYTHONPATH``, where it is the ``sitecustomize`` module (``/tfboot/hook/sitecustomize.py``;
the injector image holds this file under that name). Imported under any other name it does
nothing.

At interpreter start, after ``site`` has processed the image's own site directories, it:

1. puts back the ``PYTHONPATH`` the container would have had without tfboot: Kubernetes
   replaces an image's ``ENV PYTHONPATH`` with the container's, so ``tfboot inject`` records
   the image's value (``/tfboot/env/<container>.pythonpath``, written by an init container
   that runs the app's own image) and names the container in ``TFBOOT_INJECTED``; the
   entries go on ``sys.path`` where the hook was and into ``PYTHONPATH`` right after it (a
   child given only ``PYTHONPATH`` finds the image's modules too);
2. runs the tree's ``tfboot.pth`` line (``import tfboot``; ``tfboot.start`` on 3.15 adds
   nothing) with ``/tfboot/site`` then appended after the image's own packages (an app's own
   python-dotenv wins), as if tfboot were installed, unless the image already started its own
   tfboot: that copy configures the frameworks and the injected one stands down;
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
NAME = "sitecustomize"
# Every line here costs each Python process of the container at start (some 20 instructions a
# byte of bytecode), hence os.path's helpers and os.environ's lookups only off the common path.


def supported():
    """True under an interpreter tfboot runs on: CPython 3.10 and later."""
    implementation = getattr(sys, "implementation", None)
    name = getattr(implementation, "name", "")
    return name == "cpython" and tuple(sys.version_info[:2]) >= SUPPORTED


def _start():
    path = sys.path
    try:
        hook = __file__.rpartition(os.sep)[0]
        at = path.index(hook) if hook in path else 0  # site made each entry absolute
        while hook in path:
            path.remove(hook)  # the folder holds this module only
        root = hook.rpartition(os.sep)[0]
        data = getattr(os.environ, "_data", None)  # Python 3: the bytes behind os.environ
        if data is None or b"TFBOOT_INJECTED" in data:
            _restore_pythonpath(root, hook, at)
        tree = root + os.sep + "site"
        copy = sys.modules.get("tfboot")
        chain = True
        if copy is None and supported():
            chain = not _clear()
            path.insert(len(path) if chain else 0, tree)
            try:
                import tfboot as copy  # the tree's tfboot.pth (3.15: tfboot.start) does this
            except ImportError:
                copy = None
            path.remove(tree)
            if copy is not None:
                path.append(tree)  # after the image's own packages
                copy.STARTED = True  # site set `help` before this ran: tfboot cannot tell
        if copy is not None:
            copy.INJECTED = (hook, tree)  # what `tfboot doctor` names beside the copy that ran
        if not chain:
            return  # no sitecustomize of the image's to run
    except Exception:
        pass
    _chain()


def _clear():
    """True where no ``sys.path`` folder holds ``tfboot`` or a ``sitecustomize``, as the
    listings the import system read at this start show: then tfboot is imported from the tree
    searched first, and there is nothing to chain, each without a search of every folder (some
    50,000 instructions a folder). The finders before the path's already answered for
    ``sitecustomize`` (they come before this folder), and a meta-path finder answers for
    ``tfboot`` whatever ``sys.path`` says. False where unsure: a finder after the path's, a
    folder not listed yet, a zip file or another path hook's, a case-insensitive system."""
    try:
        return _listed_clear()
    except Exception:  # the import system's private parts are not as read here: unsure
        return False


def _listed_clear():
    external = sys.modules["_frozen_importlib_external"]
    if sys.meta_path[-1] is not external.PathFinder or sys.platform != "linux":
        return False
    cache = sys.path_importer_cache
    loaders = names = None
    for entry in sys.path:
        finder = cache.get(entry, cache)
        if finder is None:
            continue  # nothing there
        if finder is cache or type(finder) is not external.FileFinder or finder._path_mtime == -1:
            return False
        if finder._loaders != loaders:
            loaders = finder._loaders
            names = {m + s for m in ("tfboot", NAME) for s in [""] + [s for s, _ in loaders]}
        if not names.isdisjoint(finder._path_cache):
            return False
    return True


def _restore_pythonpath(root, hook, at):
    """Put the image's own PYTHONPATH entries (recorded at the Pod's start) where the hook
    was on ``sys.path``, and right after it in ``PYTHONPATH``: a child whose environment keeps
    ``PYTHONPATH`` but not ``TFBOOT_INJECTED`` still finds the image's modules, and one that
    inherits both finds them there already (nothing is added twice)."""
    container = os.environ.get(CONTAINER, "")
    if not container or "/" in container:
        return
    try:
        record = os.path.join(root, "env", container + ".pythonpath")
        with io.open(record, encoding="utf-8") as f:  # Python 2's open has no encoding
            value = f.read().strip("\n")
    except (IOError, OSError):  # distinct on Python 2
        return
    if not value:
        return
    entries = value.split(os.pathsep)
    present = set(sys.path)
    added = []
    for entry in entries:
        entry = os.path.abspath(entry or os.curdir)
        if entry not in present:
            present.add(entry)
            added.append(entry)
    sys.path[at:at] = added
    current = os.environ.get("PYTHONPATH", "")
    parts = current.split(os.pathsep) if current else []
    missing = [entry for entry in entries if entry not in parts]
    if missing:
        at = 0
        for i, part in enumerate(parts):
            if part and os.path.abspath(part) == hook:
                at = i + 1
                break
        parts[at:at] = missing
        # The one write of os.environ outside tfboot's executor (executor/environ.py): it
        # runs before any tfboot module exists (and under interpreters tfboot never loads
        # in), and PYTHONPATH is no variable tfboot reads as a user's, so it needs no record.
        os.environ["PYTHONPATH"] = os.pathsep.join(parts)


def _chain():
    """Import the image's own ``sitecustomize``, as ``site.execsitecustomize`` does. The
    import of this module ends by reading ``sys.modules["sitecustomize"]``: the image's module
    is left there, else this one."""
    this = sys.modules.pop(NAME, None)
    try:
        try:
            import sitecustomize  # noqa: F401  (the image's own, found past this folder)
        except ImportError as exc:
            if getattr(exc, "name", NAME) != NAME:
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
            sys.modules.setdefault(NAME, this)


if __name__ == "sitecustomize":
    _start()
