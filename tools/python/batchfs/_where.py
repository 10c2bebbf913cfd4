"""Where the batchfs program and libbatchfs_gpu.so are, without copying
either into the package.

In order: an environment variable ($BATCHFS for the program,
$BATCHFS_GPU_LIB for the library); what a wheel built by `make wheel`
carries (batchfs/_bin/batchfs, batchfs/libbatchfs_gpu.so); the `build/` folder of the checkout the
package was installed from (setup.py records it in batchfs/_install.py of
the installed copy only, never in the source tree) or that it sits in (a
source checkout on PYTHONPATH); the program on $PATH (and the library
beside it, or in ../lib, as `make install` lays them out); for the
library, last, the dynamic loader's search path.
"""

import ctypes
import os
import shutil

_HERE = os.path.dirname(os.path.abspath(__file__))
# The program a wheel carries (make wheel); auditwheel put every library
# it needs beside it in batchfs.libs/, except libfuse3 and fusermount3.
WHEEL_PROGRAM = os.path.join(_HERE, "_bin", "batchfs")


def build_dirs():
    """Candidate build/ folders of a batchfs checkout, best first."""
    out = []
    try:
        from . import _install  # written by setup.py into installed copies
        out.append(_install.CHECKOUT_BUILD)
    except ImportError:
        pass
    d = _HERE
    for _ in range(3):  # <repo>/tools/python/batchfs
        d = os.path.dirname(d)
    b = os.environ.get("BUILD", "build")
    out.append(b if os.path.isabs(b) else os.path.join(d, b))
    out.append(os.path.join(d, "build"))
    seen, uniq = set(), []
    for p in out:
        if p and p not in seen:
            seen.add(p)
            uniq.append(p)
    return uniq


def _is_elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def program():
    """Path of the batchfs program, or None.  On $PATH, the `batchfs`
    console script of this package (batchfs._cli) is passed over: it is
    not the program, only a way to start it."""
    env = os.environ.get("BATCHFS")
    if env:
        return env
    if os.access(WHEEL_PROGRAM, os.X_OK):
        return WHEEL_PROGRAM
    for b in build_dirs():
        p = os.path.join(b, "batchfs")
        if os.access(p, os.X_OK) and os.path.isfile(p):
            return p
    for d in os.environ.get("PATH", os.defpath).split(os.pathsep):
        p = os.path.join(d or ".", "batchfs")
        if os.access(p, os.X_OK) and os.path.isfile(p) and _is_elf(p):
            return p
    return None


def missing_system_parts(prog, mounting=True):
    """What the system lacks for the program `prog` of a wheel to run (and,
    with mounting, to mount as this user), as a sentence, or None.  A wheel leaves libfuse3 and fusermount3 to the
    system (the fuse3 package); anything else it needs it carries.  For a
    program that is not the wheel's, None: its own loader says."""
    if not prog or os.path.realpath(prog) != os.path.realpath(WHEEL_PROGRAM):
        return None
    try:
        ctypes.CDLL("libfuse3.so.3")
    except OSError:
        return ("libfuse3.so.3 is not installed: the batchfs wheel carries "
                "every library it needs except FUSE's, which must be the "
                "system's (Debian/Ubuntu: apt-get install fuse3; "
                "Fedora: dnf install fuse3)")
    if mounting and os.geteuid() != 0 and not shutil.which("fusermount3"):
        return ("fusermount3 is not installed: a mount by a user who is not "
                "root goes through it (Debian/Ubuntu: apt-get install fuse3)")
    return None


def library_candidates():
    """Paths to try for libbatchfs_gpu.so, best first (see module doc)."""
    env = os.environ.get("BATCHFS_GPU_LIB")
    if env:
        return [env]
    out = [os.path.join(_HERE, "libbatchfs_gpu.so")]  # a wheel that ships it
    out += [os.path.join(b, "libbatchfs_gpu.so") for b in build_dirs()]
    out.append(os.path.join(os.getcwd(), "build", "libbatchfs_gpu.so"))
    exe = shutil.which("batchfs")
    if exe:
        d = os.path.dirname(os.path.realpath(exe))
        out.append(os.path.join(d, "libbatchfs_gpu.so"))
        out.append(os.path.join(os.path.dirname(d), "lib", "libbatchfs_gpu.so"))
    out.append("libbatchfs_gpu.so")  # the dynamic loader's search path
    return out
