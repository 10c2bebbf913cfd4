"""Helpers for the Python parts of the integration tests."""

import os
import time


def alive(pid):
    """Process pid runs (a zombie nobody reaped yet has exited)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("State:"):
                    return "Z" not in line.split()[1]
    except OSError:
        return False
    return True


def wait_gone(pid, path, seconds=20):
    """True once daemon pid has exited and path is no mount point."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not alive(pid) and not os.path.ismount(path):
            return True
        time.sleep(0.1)
    return False
