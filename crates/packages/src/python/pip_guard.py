"""pip, run so that no requirement named by URL is ever followed.

sandbox-packages starts every pip through this file (`python3 -I -c <this> <pip's
arguments>`). A package's metadata may name a dependency by URL (`name @ https://...`,
a VCS URL, a local path); pip would fetch it, and build it if it is a source archive,
running the package's own code, whatever `--only-binary` says. Here every requirement
pip makes is looked at before pip acts on it: one with a URL ends the run at once, before
anything is fetched, naming the package whose metadata asked for it.

The refusal is the last line of stderr (the prefix, then JSON) and the exit status is
86; a pip whose internals this cannot hook is refused with status 87 (nothing runs).
The requirements sandbox-packages itself hands pip never carry a URL: it refuses them
first.
"""

import json
import os
import sys

URL_REFUSED = 86
UNSUPPORTED = 87
PREFIX = "sandbox-packages: url refused: "


def describe(comes_from):
    """The package whose metadata named the requirement, as pip knows it."""
    name = getattr(comes_from, "name", None)
    link = getattr(comes_from, "link", None)
    filename = getattr(link, "filename", None) if link is not None else None
    if name:
        return str(name), str(filename or "")
    return str(comes_from or ""), ""


def refuse(req, comes_from):
    package, distribution = describe(comes_from)
    record = {
        "package": package,
        "distribution": distribution,
        "dependency": str(getattr(req, "name", "") or ""),
        "url": str(getattr(req, "url", "") or "")[:300],
    }
    sys.stdout.flush()
    sys.stderr.write("\n" + PREFIX + json.dumps(record) + "\n")
    sys.stderr.flush()
    os._exit(URL_REFUSED)


def guard():
    try:
        from pip._internal.req.req_install import InstallRequirement
        from pip._internal.cli.main import main
    except Exception as e:  # any pip without these internals is refused
        sys.stderr.write("sandbox-packages: this pip cannot be guarded: %r\n" % (e,))
        sys.stderr.flush()
        os._exit(UNSUPPORTED)
    original = InstallRequirement.__init__

    def guarded(self, req, comes_from, *args, **kwargs):
        if req is not None and getattr(req, "url", None):
            refuse(req, comes_from)
        if kwargs.get("editable") or (args and args[0] is True):
            refuse(req, comes_from)
        original(self, req, comes_from, *args, **kwargs)

    InstallRequirement.__init__ = guarded
    return main


sys.exit(guard()(sys.argv[1:]))
