"""pip install ./tools/python: the metadata is in pyproject.toml.  This
only records, in the installed copy (never in the source tree), which
checkout it came from, so that the installed package finds that
checkout's build/batchfs and build/libbatchfs_gpu.so (batchfs/_where.py)
without copying them anywhere."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPy(build_py):
    def run(self):
        super().run()
        here = os.path.dirname(os.path.abspath(__file__))
        build = os.path.normpath(os.path.join(here, os.pardir, os.pardir,
                                              "build"))
        target = os.path.join(self.build_lib, "batchfs", "_install.py")
        with open(target, "w") as f:
            f.write("# Written by setup.py at install time: the checkout "
                    "this copy came from.\nCHECKOUT_BUILD = %r\n" % build)


setup(cmdclass={"build_py": BuildPy})
