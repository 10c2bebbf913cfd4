"""Tiny test runner for tests/gpu/*.py: prints 'ok NAME', 'not ok NAME: why'
or 'skip NAME: why' per test (the protocol of tests/run.sh), then
'N passed, N failed[, N skipped]', and exits 1 if any failed."""

import os
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "tools", "python"))


class Skip(Exception):
    pass


class Runner:
    def __init__(self):
        self.passed = self.failed = self.skipped = 0
        self.only = set(sys.argv[1:])

    def run(self, fn):
        name = fn.__name__
        if self.only and name not in self.only:
            return
        t0 = time.time()
        with tempfile.TemporaryDirectory(prefix="bfs-gpu-") as tmp:
            try:
                fn(tmp)
            except Skip as s:
                self.skipped += 1
                print("skip %s: %s" % (name, s), flush=True)
                return
            except Exception as e:
                self.failed += 1
                traceback.print_exc()
                why = str(e).splitlines()[0] if str(e) else type(e).__name__
                print("not ok %s: %s" % (name, why), flush=True)
                return
        self.passed += 1
        print("ok %s (%.2fs)" % (name, time.time() - t0), flush=True)

    def finish(self):
        line = "%d passed, %d failed" % (self.passed, self.failed)
        if self.skipped:
            line += ", %d skipped" % self.skipped
        print(line, flush=True)
        sys.exit(1 if self.failed else 0)


def repo_root():
    return os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def build_dir():
    b = os.environ.get("BUILD", "build")
    return b if os.path.isabs(b) else os.path.join(repo_root(), b)
