"""The sweep results directory: the on-disk contract between `gtplab sweep`, `gtplab push` and reports.

    RESULTS_DIR/run.json      one JSON object: the run (uuid, started, backend, lab, host)
    RESULTS_DIR/cases.jsonl   one JSON object per line, one line per finished case, in order;
                              the source of truth, appended (and flushed) as each case ends
    RESULTS_DIR/cases.csv     the same cases as CSV, nested dicts flattened with "." in the column
                              names (latency_us.p99, dut.drops_by_reason.unknown_teid); rewritten
                              from cases.jsonl after each case, so its columns always cover every case
    RESULTS_DIR/flamegraphs/case-<id>.svg   with `sweep --flamegraph` (flamegraph_path)
    RESULTS_DIR/.gtplab-sweep.lock          while a sweep writes the directory (claim)

docs/results.md describes every field. ending() says how a run ended, also a run killed before it
could say so itself (SIGKILL, out of memory, a reboot): its run.json has no end record, nothing
holds its claim, and cases.jsonl counts the cases that finished. Writing goes through a temporary file and rename (run.json,
cases.csv) or a single appended line (cases.jsonl), so a crash never leaves a half-written result.
One sweep writes a directory: it claims it first (claim(): an flock held for the run, released on
exit and by the kernel when the owner dies), and every line of cases.jsonl carries its run's uuid
(`run_uuid`), which the readers check against run.json (read_cases(run_uuid=...)).

Used by gtplab.measure.sweep (writes), gtplab.observe.flamegraph (writes the flame graphs),
gtplab.results.report and gtplab.results.push (read).
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import json
import os
import re
import time
from pathlib import Path
from typing import Any, Iterable

from gtplab import bounded
from gtplab.errors import ResultsWriteError

RUN_FILE = "run.json"
CASES_FILE = "cases.jsonl"
CSV_FILE = "cases.csv"
FLAMEGRAPH_DIR = "flamegraphs"      # `sweep --flamegraph`: one SVG per case (gtplab.observe.flamegraph)
LOCK_FILE = ".gtplab-sweep.lock"    # the claim of the sweep writing the directory (claim)

RUN_FIELDS = ("uuid", "started", "backend", "lab", "host")
# the case fields every consumer may rely on (others may be added; readers ignore what they do not know)
CASE_FIELDS = (
    "case_id", "direction", "frame_size", "flows", "flow_mode", "checksum", "bearers", "rate_mode",
    "duration_s", "offered_pps", "offered_bps_l1", "offered_bps_l2", "rx_pps", "rx_bps_l1",
    "rx_bps_l2", "tx_packets", "rx_packets", "loss_ratio", "latency_us", "dut",
)


def safe_id(case_id: str) -> str:
    """A case id as a file name: anything but letters, digits, ".", "_" and "-" replaced by "_"."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", str(case_id))


def flamegraph_path(results_dir: str | os.PathLike, case_id: str) -> Path:
    """Where the sweep's --flamegraph writes the flame graph of one case (and where reports look)."""
    return Path(results_dir) / FLAMEGRAPH_DIR / f"case-{safe_id(case_id)}.svg"


class ResultsError(Exception):
    """A results directory that does not follow the contract (message names the file and line)."""


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists are kept as JSON text."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        elif isinstance(v, (list, tuple)):
            out[key] = json.dumps(v)
        else:
            out[key] = v
    return out


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        # a full disk or a signal midway: no stray temporary file, the old file (if any) intact
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def check_writable(path: str | os.PathLike, what: str, directory: bool = False) -> None:
    """Before anything is built, sent or queried: can `path` be written (a file, or with directory=True
    a directory, made here if missing)? A byte is written and removed beside it, so a path under a file,
    a read-only and a full file system are refused now, not after the run: ResultsWriteError (exit 3),
    one line naming `what` and the path."""
    p = Path(path)
    try:
        if directory:
            p.mkdir(parents=True, exist_ok=True)
            d = p
        elif p.is_dir():
            raise IsADirectoryError(21, "Is a directory")
        else:
            d = p.parent
        probe = d / f".gtplab-write-test-{os.getpid()}"
        try:
            with open(probe, "wb") as f:
                f.write(b"\0")
                f.flush()
        finally:
            with contextlib.suppress(OSError):
                probe.unlink()
    except OSError as e:
        raise ResultsWriteError(f"Couldn't write {what} {path}: {e.strerror or e}") from None


def write_run(results_dir: str | os.PathLike, run: dict[str, Any]) -> None:
    d = Path(results_dir)
    d.mkdir(parents=True, exist_ok=True)
    missing = [k for k in RUN_FIELDS if k not in run]
    if missing:
        raise ResultsError(f"run is missing {', '.join(missing)}")
    _write_atomic(d / RUN_FILE, json.dumps(run, indent=2, sort_keys=True) + "\n")


def write_csv(path: str | os.PathLike, cases: Iterable[dict[str, Any]]) -> None:
    rows = [flatten(c) for c in cases]
    columns: list[str] = []
    for r in rows:
        columns.extend(k for k in r if k not in columns)
    tmp = Path(path).with_name(f".{Path(path).name}.tmp{os.getpid()}")
    try:
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=columns)
            w.writeheader()
            w.writerows(rows)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def append_case(results_dir: str | os.PathLike, case: dict[str, Any]) -> None:
    """Append one finished case to cases.jsonl (durably), then regenerate cases.csv."""
    d = Path(results_dir)
    with open(d / CASES_FILE, "a") as f:
        f.write(json.dumps(case, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    write_csv(d / CSV_FILE, read_cases(d, case.get("run_uuid")))


# ------------------------------------------------------------------------------------------ the claim

class ClaimError(ResultsError):
    """The results directory is claimed by another sweep (the message names it)."""


def _owner(raw: str) -> dict[str, Any] | None:
    try:
        o = json.loads(raw)
    except ValueError:
        return None
    return o if isinstance(o, dict) else None


def _owner_text(raw: str) -> str:
    o = _owner(raw)
    if o is None:
        return "another process (it has not said which yet)"
    # "what": the kind of run ("upftest handover"); a sweep's owner record has none
    return (f"{o.get('what', 'sweep')} {o.get('run_uuid', '?')} (pid {o.get('pid', '?')} on {o.get('host', '?')}, "
            f"since {o.get('started', '?')})")


class Claim:
    """One process's claim on a results directory: the lock file, flocked for as long as it is held.
    release() (or leaving the with block) removes the file, then drops the lock; a process that dies
    holding it loses the lock with its last fd, so a claim is never stale (the file it leaves behind
    is claimed again by the next one)."""

    def __init__(self, path: Path, fd: int, owner: dict[str, Any]):
        self.path, self.fd, self.owner = path, fd, owner

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            with contextlib.suppress(OSError):
                if os.stat(self.path).st_ino == os.fstat(self.fd).st_ino:
                    self.path.unlink()
        finally:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> "Claim":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def claim(results_dir: str | os.PathLike, owner: dict[str, Any]) -> Claim:
    """Claim results_dir (made if missing) for one writer: an exclusive, non-blocking flock on
    LOCK_FILE in it, which then holds `owner` as JSON (pid, host, run_uuid, started). ClaimError
    naming the owner when another process holds it. The lock file locked must still be the one in
    the directory (a claim released meanwhile unlinks it): otherwise, try again."""
    d = Path(results_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = d / LOCK_FILE
    for _ in range(20):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                # the owner writes its record right after it locked: give it that moment
                deadline = time.monotonic() + 1.0
                raw = os.pread(fd, 4096, 0).decode(errors="replace")
                while not _owner(raw) and time.monotonic() < deadline:
                    time.sleep(0.02)
                    raw = os.pread(fd, 4096, 0).decode(errors="replace")
            finally:
                os.close(fd)
            tail = ("two sweeps cannot write one directory (give another --out)" if "what" not in owner else
                    "two runs cannot write one directory (give another results directory)")
            raise ClaimError(f"results directory {d} is being written by {_owner_text(raw)}: {tail}") from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            os.close(fd)
            continue
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(owner, sort_keys=True) + "\n").encode(), 0)
        except BaseException:
            with contextlib.suppress(OSError):      # (a full disk) no lock file left behind: it is ours
                path.unlink()
            os.close(fd)
            raise
        return Claim(path, fd, owner)
    raise ClaimError(f"results directory {d}: could not claim {path} (it kept changing under us)")


def contents(results_dir: str | os.PathLike) -> list[str]:
    """The names in a results directory besides a claim's lock file (what makes it "not empty")."""
    return sorted(p.name for p in Path(results_dir).iterdir() if p.name != LOCK_FILE)


MAX_RUN_BYTES = bounded.RUN_JSON_BYTES        # run.json: its spec, layout and notes take a few kB
MAX_LINE_BYTES = bounded.CASE_LINE_BYTES      # one line of cases.jsonl: a case and its trials take some 10-100 kB
MAX_CASES_BYTES = bounded.CASES_FILE_BYTES    # all of cases.jsonl


def read_run(results_dir: str | os.PathLike) -> dict[str, Any]:
    """run.json, checked; at most MAX_RUN_BYTES of it are read, whatever the file is."""
    path = Path(results_dir) / RUN_FILE
    if not os.path.lexists(path):
        raise ResultsError(f"{path}: no such file (not a gtplab results directory?)")
    try:
        with bounded.open_file(path, error=ResultsError) as f:     # a FIFO: refused, not waited on
            try:                # a chunk at a time: no buffer of the limit's size for a file of a few kB
                raw = bounded.read_at_most(f, MAX_RUN_BYTES, str(path))
            except bounded.TooLarge:
                raise ResultsError(f"{path}: larger than {MAX_RUN_BYTES >> 20} MiB: not a run.json") from None
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such file (not a gtplab results directory?)") from None
    except OSError as e:
        raise ResultsError(f"{path}: {e.strerror or e}") from None
    try:
        run = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ResultsError(f"{path}: not JSON: {e}") from None
    if not isinstance(run, dict):
        raise ResultsError(f"{path}: not a JSON object")
    missing = [k for k in RUN_FIELDS if k not in run]
    if missing:
        raise ResultsError(f"{path}: missing {', '.join(missing)}")
    return run


def _lines(path: Path):
    """(line number, bytes, the line parsed as JSON or the error) of cases.jsonl, one line at a time:
    the memory is one line, and a line over MAX_LINE_BYTES (a binary, /dev/zero) is an error naming
    it, read no further; so is a file over MAX_CASES_BYTES in all, and a FIFO (not waited on). A
    line without its newline is the last one."""
    if not os.path.lexists(path):
        raise FileNotFoundError(path)
    for n, raw in bounded.read_lines(path, MAX_CASES_BYTES, MAX_LINE_BYTES, error=ResultsError):
        try:
            parsed: Any = json.loads(raw) if raw.strip() else None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            parsed = e
        yield n, raw, parsed


def torn_last_line(results_dir: str | os.PathLike) -> int | None:
    """The line number of a torn last line of cases.jsonl (a run killed while writing it), or None."""
    path = Path(results_dir) / CASES_FILE
    last = None
    try:
        for n, raw, parsed in _lines(path):
            last = (n, raw, parsed)
    except (OSError, ResultsError):
        return None
    if last is None or last[1].endswith(b"\n") or not isinstance(last[2], ValueError):
        return None
    return last[0]


def read_cases(results_dir: str | os.PathLike, run_uuid: str | None = None) -> list[dict[str, Any]]:
    """Every case of cases.jsonl. A torn last line (no newline, not JSON: the writer was killed in
    the middle of it) is left out, and torn_last_line() says which; any other bad line is an error.
    With run_uuid (run.json's), a line of another run (its `run_uuid` differs) is an error naming
    both; a line without one (written before run ids) is read as the directory's. Read a line at a
    time (_lines: none longer than MAX_LINE_BYTES)."""
    path = Path(results_dir) / CASES_FILE
    cases = []
    try:
        for n, raw, case in _lines(path):
            if case is None:
                continue
            if isinstance(case, ValueError):
                if not raw.endswith(b"\n"):
                    continue                    # torn: the last line, without its newline
                raise ResultsError(f"{path}:{n}: not JSON: {case}")
            if not isinstance(case, dict):
                raise ResultsError(f"{path}:{n}: not a JSON object")
            for k in ("case_id", "direction", "frame_size"):
                if k not in case:
                    raise ResultsError(f"{path}:{n}: missing {k}")
            if run_uuid is not None and case.get("run_uuid", run_uuid) != run_uuid:
                raise ResultsError(f"{path}:{n}: a case of run {case['run_uuid']}, not of this directory's run "
                                   f"{run_uuid} (run.json): two runs wrote this file")
            cases.append(case)
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such file") from None
    except OSError as e:
        raise ResultsError(f"{path}: {e.strerror or e}") from None
    return cases


# ------------------------------------------------------------------------------------------ how a run ended

ENDINGS = ("finished", "interrupted", "stopped", "killed", "running", "unknown")


def claimed(results_dir: str | os.PathLike) -> bool:
    """Whether a live process holds the claim on results_dir (a sweep writing it now). A dead
    owner's lock is gone with its process, whatever file it left."""
    try:
        fd = os.open(Path(results_dir) / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)            # and with it the shared lock, if we got it
    return False


def ending(results_dir: str | os.PathLike, run: dict[str, Any] | None = None,
           cases: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """How the run of results_dir ended: {"how", "done", "planned", "cut_short"}.

    how: finished, interrupted (SIGINT/SIGTERM), stopped (an error) as run.json says; running
    while a process holds the directory's claim; killed when run.json has no end record and nobody
    holds the claim (the sweep writes one whatever happens, unless it is killed: SIGKILL, out of
    memory, a reboot); unknown for a run.json without cases_planned (written by hand, or before
    runs said how they ended). done: the cases that finished, counted in cases.jsonl (the source
    of truth: a killed run's run.json never got its cases_done). cut_short: "cut short: N of M
    cases" for a run that did not end normally (interrupted, stopped, killed), else None."""
    d = Path(results_dir)
    if run is None:
        run = read_run(d)
    if cases is None:
        try:
            cases = read_cases(d, run.get("uuid"))
        except ResultsError:
            cases = None
    done = len(cases) if cases is not None else run.get("cases_done")
    planned = run.get("cases_planned")
    if run.get("finished") or run.get("status") == "complete":     # a sweep's end record; an upftest's status
        how = "finished"
    elif run.get("interrupted"):
        how = "interrupted"
    elif run.get("stopped") or run.get("status") == "error":
        how = "stopped"
    elif claimed(d):
        how = "running"
    elif "cases_planned" in run:
        how = "killed"
    else:
        how = "unknown"
    cut = (f"cut short: {done if done is not None else '?'} of {planned if planned is not None else '?'} cases"
           if how in ("interrupted", "stopped", "killed") else None)
    return {"how": how, "done": done, "planned": planned, "cut_short": cut}
