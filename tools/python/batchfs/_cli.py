"""The `batchfs` command of a pip install (the console script): it runs
the batchfs program, the wheel's own (batchfs/_bin/batchfs) when it
carries one, else the one batchfs/_where.py finds, with the same
arguments.  Before that it says in words when the system lacks what a
wheel leaves to it: libfuse3 and fusermount3 (the fuse3 package)."""

import os
import sys

from . import _where


def main():
    prog = _where.program()
    if not prog:
        sys.stderr.write("batchfs: the batchfs program was not found: this "
                         "install carries none (pip install a wheel from "
                         "`make wheel`, or build it with make and set "
                         "$BATCHFS)\n")
        return 1
    # The program links libfuse3, so no command runs without it; only
    # mount needs fusermount3.
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    why = _where.missing_system_parts(prog, mounting=cmd == "mount")
    if why:
        sys.stderr.write("batchfs: %s\n" % why)
        return 1
    try:
        os.execv(prog, ["batchfs"] + sys.argv[1:])
    except OSError as e:
        why = _where.missing_system_parts(prog)
        sys.stderr.write("batchfs: cannot run %s: %s%s\n"
                         % (prog, e.strerror, "; " + why if why else ""))
        return 1


if __name__ == "__main__":
    sys.exit(main())
