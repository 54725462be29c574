"""Makes the files of a test package index (crates/runner/tests/common/index.rs).

Usage: python3 index_files.py OUT_DIR SPEC_JSON

SPEC_JSON is a list of packages, each one of:
  {"wheel": NAME, "version": V, "requires": [..], "zeros": BYTES}
      a pure-Python wheel NAME-V-py3-none-any.whl under OUT_DIR/NAME/, whose metadata
      has these Requires-Dist lines, and, with "zeros", a file of that many zero bytes
      (deflated: a few hundred KiB unpack to that size);
  {"sdist": NAME, "version": V, "marker": PATH}
      a source archive OUT_DIR/NAME/NAME-V.tar.gz whose in-tree build backend writes
      PATH (the user it ran as and its environment's names) as soon as a build
      frontend asks it anything: the proof that a package's code ran.
"""

import base64
import hashlib
import io
import json
import os
import re
import sys
import tarfile
import zipfile


def record_hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def project(name):
    """The index's folder of a project: its PEP 503 normalised name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel(out, spec):
    name, version = spec["wheel"], spec["version"]
    dist_info = "%s-%s.dist-info" % (name, version)
    files = {"%s/__init__.py" % name: b"VERSION = %r\n" % version}
    metadata = "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version)
    metadata += "".join("Requires-Dist: %s\n" % r for r in spec.get("requires", []))
    files[dist_info + "/METADATA"] = metadata.encode()
    files[dist_info + "/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: sandbox-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    zeros = spec.get("zeros", 0)
    records = ["%s,%s,%d" % (path, record_hash(data), len(data)) for path, data in files.items()]
    if zeros:
        records.append("%s/zeros.bin,%s,%d" % (name, record_hash(bytes(zeros)), zeros))
    records.append(dist_info + "/RECORD,,")
    files[dist_info + "/RECORD"] = ("\n".join(records) + "\n").encode()
    folder = os.path.join(out, project(name))
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "%s-%s-py3-none-any.whl" % (name, version))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for member, data in files.items():
            if member.endswith("RECORD") and zeros:
                z.writestr("%s/zeros.bin" % name, bytes(zeros))
            z.writestr(member, data)


BACKEND = '''
import os


def _ran(*_args, **_kwargs):
    with open(%(marker)r, "w") as f:
        f.write("uid=%%d\\n" %% os.getuid())
        f.write("\\n".join(sorted(os.environ)))
    raise SystemExit("payload's build backend ran")


get_requires_for_build_wheel = _ran
prepare_metadata_for_build_wheel = _ran
build_wheel = _ran
build_sdist = _ran
'''


def sdist(out, spec):
    name, version = spec["sdist"], spec["version"]
    top = "%s-%s" % (name, version)
    members = {
        top + "/PKG-INFO": "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version),
        top + "/pyproject.toml": (
            '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
        ),
        top + "/backend.py": BACKEND % {"marker": spec["marker"]},
        top + "/setup.py": BACKEND % {"marker": spec["marker"]} + "\n_ran()\n",
    }
    folder = os.path.join(out, project(name))
    os.makedirs(folder, exist_ok=True)
    with tarfile.open(os.path.join(folder, top + ".tar.gz"), "w:gz") as tar:
        for member, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(member)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))


def main():
    out, specs = sys.argv[1], json.loads(sys.argv[2])
    for spec in specs:
        (wheel if "wheel" in spec else sdist)(out, spec)


main()
