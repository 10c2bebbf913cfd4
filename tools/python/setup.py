"""pip install ./tools/python: the metadata is in pyproject.toml.  This
only records, in the installed copy (never in the source tree), which
checkout it came from, so that the installed package finds that
checkout's build/batchfs and build/libbatchfs_gpu.so (batchfs/_where.py)
without copying them anywhere.

`make wheel` builds from a staged copy that carries the program
(batchfs/_bin/batchfs) with BATCHFS_WHEEL=1: then no checkout is
recorded, and the wheel is tagged for the platform (py3-none-linux_ARCH,
which auditwheel turns into manylinux), since it holds machine code."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py


WHEEL = os.environ.get("BATCHFS_WHEEL") == "1"


class BuildPy(build_py):
    def run(self):
        super().run()
        if WHEEL:
            return
        here = os.path.dirname(os.path.abspath(__file__))
        build = os.path.normpath(os.path.join(here, os.pardir, os.pardir,
                                              "build"))
        target = os.path.join(self.build_lib, "batchfs", "_install.py")
        with open(target, "w") as f:
            f.write("# Written by setup.py at install time: the checkout "
                    "this copy came from.\nCHECKOUT_BUILD = %r\n" % build)


cmdclass = {"build_py": BuildPy}
distclass = None
if WHEEL:
    from setuptools.dist import Distribution
    try:
        from setuptools.command.bdist_wheel import bdist_wheel
    except ImportError:  # setuptools < 70
        from wheel.bdist_wheel import bdist_wheel

    class BinaryDistribution(Distribution):
        def has_ext_modules(self):
            return True  # it holds the program: a platform wheel

    class BdistWheel(bdist_wheel):
        def get_tag(self):
            _, _, plat = super().get_tag()
            return "py3", "none", plat  # no extension module: any Python 3

    cmdclass["bdist_wheel"] = BdistWheel
    distclass = BinaryDistribution

setup(cmdclass=cmdclass, **({"distclass": distclass} if distclass else {}))
