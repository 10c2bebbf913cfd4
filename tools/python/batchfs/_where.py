"""Where the batchfs program and libbatchfs_gpu.so are, without copying
either into the package.

In order: an environment variable ($BATCHFS for the program,
$BATCHFS_GPU_LIB for the library); the `build/` folder of the checkout the
package was installed from (setup.py records it in batchfs/_install.py of
the installed copy only, never in the source tree) or that it sits in (a
source checkout on PYTHONPATH); the program on $PATH (and the library
beside it, or in ../lib, as `make install` lays them out); for the
library, last, the dynamic loader's search path.
"""

import os
import shutil

_HERE = os.path.dirname(os.path.abspath(__file__))


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


def program():
    """Path of the batchfs program, or None."""
    env = os.environ.get("BATCHFS")
    if env:
        return env
    for b in build_dirs():
        p = os.path.join(b, "batchfs")
        if os.access(p, os.X_OK) and os.path.isfile(p):
            return p
    return shutil.which("batchfs")


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
