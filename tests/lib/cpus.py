"""The machine's CPUs between the suites that run on it at once: a test marked `timing` has them to itself.

Several developers run the suite at once on one machine, and their labs share CPUs (tests/conftest.py
sets $GTPLAB_SHARE_CPUS=1): sharing changes no result of a test that times nothing. A test that
times, rates or periods something (marker `timing`, docs/testing.md) must not share, so the suite's
runs agree through one reader/writer lock, a pair of files every user can lock (flock):

    lock = SuiteCpus()                   # $GTPLAB_SUITE_LOCK, else /run/lock/gtplab-suite-cpus.lock
    lock.shared(300)     # a module of lab or bpf tests: beside other such modules, never beside a timing test
    lock.exclusive(300)  # a timing test: waits until no other run's such module holds the lock, and
                         # holds it, and the turnstile, until release(): new lab modules wait meanwhile
    lock.release()

The writer takes the turnstile (LOCK_EX on <path>.turnstile) before it waits for the lock itself, and
every reader passes the turnstile before it takes its share, so a timing test is not starved by the
modules of several runs that overlap. Each call returns the seconds it waited, or None when the
deadline passed first (nothing is then held). flock is per open file: two SuiteCpus in one process
exclude each other as two processes do; a process that dies releases what it held.

The lock covers the suite's runs that use it: each holds <path>.members shared for its life, so
participants() names them (/proc/locks). A participant's labs are idle while a timing test holds the
lock (it runs no lab test meanwhile, though a module's lab may stay up between two of its tests). Labs
made otherwise (`gtplab lab up`, a sweep, a run of an older suite) are found by their CPU claims
(gtplab/lab/claims.py): others_on_cpus() lists the labs of processes that are not participants.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

DEFAULT = "/run/lock/gtplab-suite-cpus.lock"
POLL_S = 0.1


def lock_path() -> Path:
    return Path(os.environ.get("GTPLAB_SUITE_LOCK", DEFAULT))


def _open(path: Path) -> int:
    """The file, created readable by every user when missing. Opened read-only: flock needs no more, and
    another user's file in a sticky directory can be opened so (O_CREAT on it would be refused)."""
    while True:
        try:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            pass
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            continue
        os.fchmod(fd, 0o644)            # whatever the umask: other users lock it too
        return fd


def _flock(fd: int, op: int, deadline: float) -> bool:
    """flock(fd, op) by polling until deadline (monotonic); whether it was taken."""
    while True:
        try:
            fcntl.flock(fd, op | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)


class SuiteCpus:
    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path else lock_path()
        self.mode: str | None = None        # None, "shared" or "exclusive"
        self._fd = self._gate = self._member = None

    def _fds(self) -> tuple[int, int]:
        if self._fd is None:
            self._fd = _open(self.path)
            self._gate = _open(self.path.with_name(self.path.name + ".turnstile"))
            self._member = _open(members_path(self.path))
            fcntl.flock(self._member, fcntl.LOCK_SH)      # never refused: nobody takes it exclusively
        return self._fd, self._gate

    def shared(self, timeout: float) -> float | None:
        """Hold the lock shared; the seconds waited, None when timeout passed first."""
        if self.mode == "shared":
            return 0.0
        self.release()
        fd, gate = self._fds()
        t0 = time.monotonic()
        deadline = t0 + timeout
        if not _flock(gate, fcntl.LOCK_EX, deadline):
            return None
        fcntl.flock(gate, fcntl.LOCK_UN)              # passed: a waiting writer is not overtaken
        if not _flock(fd, fcntl.LOCK_SH, deadline):
            return None
        self.mode = "shared"
        return time.monotonic() - t0

    def exclusive(self, timeout: float) -> float | None:
        """Hold the lock alone; the seconds waited, None when timeout passed first."""
        if self.mode == "exclusive":
            return 0.0
        self.release()                                # never wait while holding a share: deadlock
        fd, gate = self._fds()
        t0 = time.monotonic()
        deadline = t0 + timeout
        if not _flock(gate, fcntl.LOCK_EX, deadline):
            return None
        if not _flock(fd, fcntl.LOCK_EX, deadline):
            fcntl.flock(gate, fcntl.LOCK_UN)
            return None
        self.mode = "exclusive"
        return time.monotonic() - t0

    def release(self) -> None:
        if self.mode is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            fcntl.flock(self._gate, fcntl.LOCK_UN)    # held by a writer only; a no-op for a reader
            self.mode = None

    def close(self) -> None:
        self.release()
        for fd in (self._fd, self._gate, self._member):
            if fd is not None:
                os.close(fd)
        self._fd = self._gate = self._member = None


def members_path(path: Path | None = None) -> Path:
    path = path or lock_path()
    return path.with_name(path.name + ".members")


def participants(path: Path | None = None) -> set[int]:
    """The pids of the processes that use the suite lock at path now (holders of its .members file)."""
    try:
        st = os.stat(members_path(path))
    except FileNotFoundError:
        return set()
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    out = set()
    for ln in Path("/proc/locks").read_text().splitlines():
        f = ln.split()
        if len(f) >= 6 and f[1] == "FLOCK" and f[5] == dev:     # "1: FLOCK ADVISORY READ <pid> <maj:min:ino> ..."
            out.add(int(f[4]))
    return out


def others_on_cpus() -> list[dict]:
    """The live labs holding any of this machine's CPUs now (gtplab/lab/claims.py) whose owners are
    neither this process nor a participant of the suite lock: [{"lab", "pid", "cpus", "shared"}]. A
    user who may not lock the claims directory (not root) reads the claim files without the lock (and
    removes no stale one)."""
    import json

    from gtplab.lab import claims
    cpus = list(range(os.cpu_count() or 1))
    try:
        held = claims.holders(cpus)
    except PermissionError:
        live = []
        for f in sorted(claims.claims_dir().glob("cpu*.json")):
            try:
                c = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            if claims._live(c)[0]:
                live.append(c)
        held = claims._by_lab(live)
    ours = participants() | {os.getpid()}
    return [h for h in held if h.get("pid") not in ours]
