"""Count what tfboot's start-up files run when ``site`` processes them.

Run as ``python -S startup_probe.py``: with ``site`` not yet run, it installs an audit hook
(which sees the source of every ``exec``'d ``.pth`` import line) and a profile function
(which sees every call of ``tfboot._startup.install`` and of ``tfboot._start``, the
``tfboot.start`` entry point, and every execution of the ``tfboot`` package's body), then
runs ``site.main()`` as interpreter start-up would, and prints the counts and what
start-up left behind as one JSON object. Standard library only.
"""

import json
import sys

counts = {"pth_import_lines": 0, "start_calls": 0, "install_calls": 0, "package_bodies": 0}


def audit(event, args):
    # site exec()s each import line: compiled from a string, not from a file.
    source = args[0] if event == "compile" else b""
    text = source.decode() if isinstance(source, bytes) else str(source)
    if args[1:2] == ("<string>",) and "tfboot" in text:
        counts["pth_import_lines"] += 1


def profile(frame, event, arg):
    if event != "call":
        return
    code = frame.f_code
    if code.co_filename.endswith("/tfboot/_startup.py") and code.co_name == "install":
        counts["install_calls"] += 1
    elif code.co_filename.endswith("/tfboot/__init__.py") and code.co_name == "<module>":
        counts["package_bodies"] += 1
    elif code.co_filename.endswith("/tfboot/__init__.py") and code.co_name == "_start":
        counts["start_calls"] += 1


def origin(finder):
    """The module a ``sys.meta_path`` entry (a module, class or instance) comes from."""
    if isinstance(finder, type(sys)):
        return finder.__name__
    return getattr(finder if isinstance(finder, type) else type(finder), "__module__", "")


sys.addaudithook(audit)
sys.setprofile(profile)
import site  # noqa: E402  (imported only now: -S kept it from running at start)

site.main()
sys.setprofile(None)
print(
    json.dumps(
        {
            **counts,
            "version": "{}.{}".format(*sys.version_info[:2]),
            "hook_loaded": "tfboot._hook" in sys.modules,
            "tfboot_finders": [m for m in map(origin, sys.meta_path) if m.startswith("tfboot")],
        }
    )
)
