"""What the tests share: a real tallyd in a temp directory with its HTTP
face on a loopback port of the kernel's, and the one wait of the tests.

Waits are on facts (a file, a line, a reply), never on the clock: wait_for
polls a condition every 20 ms up to a bound scaled by $TALLY_TEST_SLOWDOWN
(as the C suites' tests/support/wait.h), and names what it waited for when
the bound passes.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, List, Optional, TypeVar

HERE = Path(__file__).resolve().parent
PACKAGE_DIR = HERE.parent                       # clients/python
SOURCE_DIR = PACKAGE_DIR.parent.parent          # the tree
T = TypeVar("T")


def slowdown() -> float:
    """The factor of every bound: $TALLY_TEST_SLOWDOWN, else 6 under a
    $TALLYD_WRAPPER (valgrind), else 1."""
    if os.environ.get("TALLY_TEST_SLOWDOWN"):
        return float(os.environ["TALLY_TEST_SLOWDOWN"])
    return 6.0 if os.environ.get("TALLYD_WRAPPER") else 1.0


def wait_for(what: str, seconds: float, condition: Callable[[], Optional[T]]) -> T:
    """The first true value of ``condition()``, polled every 20 ms for
    ``seconds`` times the slowdown; past that, AssertionError naming
    ``what``. The one pause of these tests."""
    deadline = time.monotonic() + seconds * slowdown()
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"waited {seconds} s (x{slowdown():g}) for: {what}")
        time.sleep(0.02)  # the one pause


def tallyd_program() -> str:
    """$TALLYD (make check sets it), else build/tallyd of the tree."""
    path = os.environ.get("TALLYD") or str(SOURCE_DIR / "build" / "tallyd")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"no tallyd at {path}: build the tree, or set $TALLYD")
    return path


class Tallyd:
    """A tallyd process on its own data directory, HTTP on 127.0.0.1.

    ``start()`` waits for its ready file; ``stop()`` ends it with SIGTERM
    (SIGKILL when asked); ``start(port=same)`` restarts it on the same
    data and port. ``url`` is its HTTP URL."""

    def __init__(self, extra_args: Optional[List[str]] = None):
        self.dir = Path(tempfile.mkdtemp(prefix="tally-py.", dir=os.environ.get("TMPDIR")))
        self.extra_args = list(extra_args or [])
        self.proc: Optional[subprocess.Popen] = None
        self.port = 0
        self.url = ""
        self.starts = 0

    def start(self, port: Optional[int] = None) -> "Tallyd":
        port = self.port if port is None else port
        ready = self.dir / "ready"
        if ready.exists():
            ready.unlink()
        self.starts += 1
        log = open(self.dir / f"tallyd.{self.starts}.log", "wb")
        args = [tallyd_program(), "--data", str(self.dir / "data"),
                "--listen", "tcp://127.0.0.1:0", "--publish", "none",
                "--http", f"http://127.0.0.1:{port}", "--ready-file", str(ready)]
        wrapper = os.environ.get("TALLYD_WRAPPER", "").split()
        self.proc = subprocess.Popen(wrapper + args + self.extra_args, stdout=log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()

        def http_line() -> Optional[str]:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"tallyd exited {self.proc.returncode}:\n{self.log_tail()}")
            if not ready.exists():
                return None
            for line in ready.read_text().splitlines():
                if line.startswith("http "):
                    return line[5:].strip()
            return None

        self.url = wait_for("tallyd's ready file with its http line", 30, http_line)
        self.port = int(self.url.rsplit(":", 1)[1])
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=30 * slowdown())
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def log_tail(self, size: int = 4000) -> str:
        logs = sorted(self.dir.glob("tallyd.*.log"))
        return logs[-1].read_bytes()[-size:].decode("utf-8", "replace") if logs else ""

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def python() -> str:
    """The interpreter running the tests (for worker subprocesses)."""
    return sys.executable
