"""CPU profiles of the DUT during sweep cases: `perf record -a -g`, then a flame graph SVG per case.

    prof = Profiler(results_dir / "flamegraphs", cpus=None)      # None: all CPUs (-a)
    check_available()                                            # before the sweep starts
    with prof.case(case_id):                                     # perf records only inside
        run_case(...)
    # -> flamegraphs/case-<id>.svg (the flame graph) and case-<id>.folded (the collapsed stacks)

How: `perf record -a -g -F 999 -e EVENT -D -1 --control fifo:...` starts disabled; `start()` enables
the events through the control FIFO and waits for perf's ack, so the profile covers the case and not
perf's own start-up. `stop()` disables, stops perf (SIGINT), runs `perf script`, collapses every
sample's stack into one "root;...;leaf count" line (collapse()), and draws the SVG (flamegraph_svg()).
Both are written here in Python: Brendan Gregg's FlameGraph scripts are not packaged for Debian.

EVENT is `cycles` when the CPU exposes hardware counters, else the `cpu-clock` software event (VMs).
BPF programs show in stacks as bpf_prog_<tag>_<name> (e.g. bpf_prog_d6ea26b34215b5f5_xdp_access):
`perf script` finds them in /proc/kallsyms while they are loaded (perf records no BPF events here:
NO_BPF_EVENT says why).

Used by gtplab.measure.sweep (`--flamegraph`); where a case's SVG goes in a results directory is
gtplab.results.store.flamegraph_path (the reports look there).
"""

from __future__ import annotations

import html
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time
import zlib
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from gtplab.errors import UserError
from gtplab.results.store import safe_id

PERF = "perf"
FREQ = 999  # Hz: not a multiple of common timer ticks, so sampling does not lock step with them
# No PERF_RECORD_KSYMBOL/BPF_EVENT records: they come from every BPF program any process loads or
# unloads on the host while perf runs, and perf 6.1's `perf script` stopped on some of them ("failed
# to process type: 17 [Bad address]", seen here with other labs' programs coming and going). BPF
# programs are still named in the stacks: `perf script` resolves them from /proc/kallsyms, where the
# DUT's programs are while the sweep runs (bpf_prog_<tag>_xdp_access).
NO_BPF_EVENT = "--no-bpf-event"


class FlamegraphError(UserError):
    """perf is missing, not permitted, or failed (one line; the CLI exits 2)."""


# --- availability -----------------------------------------------------------------------------------

def _perf_bin() -> str:
    path = shutil.which(PERF)
    if not path:
        raise FlamegraphError("perf not found: install linux-perf (Debian) to use --flamegraph")
    return path


def _run(cmd: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def hardware_events() -> bool:
    """True if the `cycles` hardware event counts here (VMs often have no PMU)."""
    cp = _run([_perf_bin(), "stat", "-x", ",", "-e", "cycles", "-a", "--", "true"])
    return cp.returncode == 0 and "<not supported>" not in cp.stderr and "<not counted>" not in cp.stderr


_event: str | None = None


def default_event() -> str:
    global _event
    if _event is None:
        _event = "cycles" if hardware_events() else "cpu-clock"
    return _event


def check_available() -> None:
    """Raise FlamegraphError (one clear line) unless a system-wide perf record with call graphs works."""
    perf = _perf_bin()
    event = default_event()
    with tempfile.TemporaryDirectory(prefix="gtplab-perf-") as tmp:
        data = os.path.join(tmp, "probe.data")
        try:
            cp = _run([perf, "record", "-a", "-g", "-F", str(FREQ), "-e", event, NO_BPF_EVENT, "-o", data,
                       "--", "sleep", "0.05"])
        except subprocess.TimeoutExpired:
            raise FlamegraphError("perf record -a -g did not finish within 30 s") from None
        if cp.returncode != 0:
            lines = [ln.strip() for ln in cp.stderr.splitlines() if ln.strip()]
            why = next((ln for ln in lines if "paranoid" in ln or "ermission" in ln or "rror" in ln),
                       lines[-1] if lines else f"exit status {cp.returncode}")
            raise FlamegraphError(f"perf record -a -g is not permitted or failed here: {why} "
                               "(run as root, or lower /proc/sys/kernel/perf_event_paranoid)")
        cp = _run([perf, "script", "-i", data, "--no-inline"])
        if cp.returncode != 0:
            raise FlamegraphError(f"perf script failed: {cp.stderr.strip().splitlines()[-1:]}")


# --- perf script output -> folded stacks ------------------------------------------------------------

# header: "comm pid[/tid] [cpu] time: [period] event:" (comm may contain spaces)
_HEADER = re.compile(r"^(?P<comm>\S.*?)\s+(?P<pid>\d+)(?:/\d+)?\s+(?:\[\d+\]\s+)?[\d.]+:")
# frame: "\t addr symbol+0xoff (dso)"
_FRAME = re.compile(r"^\s+(?P<addr>[0-9a-fA-F]+)\s+(?P<sym>.*?)\s+\((?P<dso>[^()]*)\)\s*$")
_FRAME_NODSO = re.compile(r"^\s+(?P<addr>[0-9a-fA-F]+)\s+(?P<sym>.+?)\s*$")


def _frame_name(sym: str, dso: str) -> str:
    sym = re.sub(r"\+0x[0-9a-fA-F]+$", "", sym.strip())
    if not sym or sym == "[unknown]":
        base = os.path.basename(dso) if dso and dso != "[unknown]" else "unknown"
        return f"[{base}]"
    # ';' separates frames in the folded format; ' ' separates the count
    return sym.replace(";", ":").replace(" ", "_")


def collapse(perf_script: str | Iterable[str], *, comm: bool = True) -> dict[str, int]:
    """perf script text -> {"root;...;leaf": samples}, like FlameGraph's stackcollapse-perf.pl.

    perf prints each sample's stack leaf first; folded stacks are root first. With comm, the process
    name is the root frame. Offsets (+0x..) are dropped; an unknown symbol becomes [dso]."""
    lines = perf_script.splitlines() if isinstance(perf_script, str) else perf_script
    folded: dict[str, int] = defaultdict(int)
    name: str | None = None
    frames: list[str] = []

    def flush() -> None:
        if name is not None:
            stack = list(reversed(frames))
            if comm:
                stack.insert(0, name.replace(";", ":").replace(" ", "_"))
            if stack:
                folded[";".join(stack)] += 1

    for raw in lines:
        line = raw.rstrip("\n")
        if not line.strip():
            flush()
            name, frames = None, []
            continue
        if line[0] in " \t":
            if name is None:
                continue
            m = _FRAME.match(line) or _FRAME_NODSO.match(line)
            if m:
                frames.append(_frame_name(m["sym"], m.groupdict().get("dso") or ""))
            continue
        if line.startswith("#"):
            continue
        flush()
        m = _HEADER.match(line)
        name, frames = (m["comm"] if m else line.split()[0]), []
    flush()
    return dict(folded)


def folded_text(folded: dict[str, int]) -> str:
    return "".join(f"{stack} {n}\n" for stack, n in sorted(folded.items()))


def parse_folded(text: str) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            raise ValueError(f"line {n}: not 'frame;frame;... count': {line!r}")
        out[stack] += int(count)
    return dict(out)


# --- folded stacks -> SVG ---------------------------------------------------------------------------

class _Node:
    __slots__ = ("name", "count", "children")

    def __init__(self, name: str):
        self.name = name
        self.count = 0
        self.children: dict[str, _Node] = {}


def _tree(folded: dict[str, int]) -> _Node:
    root = _Node("all")
    for stack, n in folded.items():
        root.count += n
        node = root
        for frame in stack.split(";"):
            node = node.children.setdefault(frame, _Node(frame))
            node.count += n
    return root


def _color(name: str) -> str:
    """BPF programs green, kernel-ish names orange, the rest red-yellow; stable per name."""
    h = zlib.crc32(name.encode())
    if name.startswith("bpf_prog_"):
        return f"rgb({40 + h % 40},{170 + h % 60},{60 + h % 40})"
    if name.startswith("[") or name.startswith("__") or name.endswith("_[k]"):
        return f"rgb({220 + h % 35},{120 + h % 60},{40 + h % 30})"
    return f"rgb({225 + h % 30},{60 + h % 130},{40 + h % 30})"


def flamegraph_svg(folded: dict[str, int], title: str = "Flame Graph", *, width: int = 1200,
                   frame_height: int = 16, min_width: float = 0.1, subtitle: str = "") -> str:
    """A flame graph (root at the bottom, width = samples) as one self-contained SVG document.

    Every frame is a <g> with a <title> (name, samples, share; shown on hover), a <rect> and, when
    wide enough, a clipped <text>. Siblings are sorted by name, so identical stacks merge."""
    root = _tree(folded)
    total = root.count
    pad, top = 10, 40 if subtitle else 30
    rects: list[tuple[int, float, float, _Node]] = []  # (depth, x, w, node)

    def walk(node: _Node, depth: int, x: float, scale: float) -> None:
        w = node.count * scale
        if w < min_width:
            return
        rects.append((depth, x, w, node))
        cx = x
        for name in sorted(node.children):
            child = node.children[name]
            walk(child, depth + 1, cx, scale)
            cx += child.count * scale

    if total:
        walk(root, 0, pad, (width - 2 * pad) / total)
    depth_max = max((d for d, *_ in rects), default=0)
    height = top + (depth_max + 1) * frame_height + 2 * pad + 10
    char_w = 0.59 * 12  # Verdana-ish at font-size 12

    out = [
        '<?xml version="1.0" standalone="no"?>',
        f'<svg version="1.1" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="Verdana, sans-serif" font-size="12">',
        '<rect x="0" y="0" width="100%" height="100%" fill="#f8f8f0"/>',
        f'<text x="{width / 2:.0f}" y="20" text-anchor="middle" font-size="16">{html.escape(title)}</text>',
    ]
    if subtitle:
        out.append(f'<text x="{width / 2:.0f}" y="36" text-anchor="middle" fill="#555">'
                   f'{html.escape(subtitle)}</text>')
    if not total:
        out.append(f'<text x="{width / 2:.0f}" y="{top + 20}" text-anchor="middle">no samples</text>')
    base = height - pad - 10
    for i, (depth, x, w, node) in enumerate(rects):
        y = base - (depth + 1) * frame_height
        name = html.escape(node.name)
        share = 100.0 * node.count / total
        fill = "rgb(220,220,220)" if depth == 0 else _color(node.name)
        out.append(f'<g><title>{name} ({node.count} samples, {share:.2f}%)</title>'
                   f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{frame_height - 1}" fill="{fill}" rx="2"/>')
        fit = int((w - 6) // char_w)
        if fit >= 3:
            label = node.name if len(node.name) <= fit else node.name[:fit - 2] + ".."
            out.append(f'<text x="{x + 3:.2f}" y="{y + frame_height - 4}">{html.escape(label)}</text>')
        out.append('</g>')
    out.append('</svg>')
    return "\n".join(out) + "\n"


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def _die_with_parent() -> None:
    """In the perf child: SIGTERM when the sweep dies, so perf never records on forever."""
    import ctypes
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


# --- the profiler -----------------------------------------------------------------------------------

class Profiler:
    """perf record around each case; writes OUT_DIR/case-<id>.svg and case-<id>.folded.

    cpus: the DUT's CPUs, e.g. [0, 1] (perf -C); None records all CPUs (-a). The event is `cycles` if
    the CPU has hardware counters, else `cpu-clock`. Use `with prof.case(case_id): ...` or
    start(case_id) ... stop(). Call check_available() before the sweep, so --flamegraph fails early."""

    def __init__(self, out_dir: str | os.PathLike, cpus: Iterable[int] | None = None, *,
                 freq: int = FREQ, event: str | None = None, keep_data: bool = False,
                 timeout: float = 30.0):
        self.out_dir = Path(out_dir)
        self.cpus = sorted(set(int(c) for c in cpus)) if cpus is not None else None
        self.freq = freq
        self.event = event
        self.keep_data = keep_data
        self.timeout = timeout
        self._proc: subprocess.Popen | None = None
        self._tmp: str | None = None
        self._ctl = self._ack = -1
        self._case: str | None = None
        self.last_svg: Path | None = None  # the flame graph stop() wrote last

    # perf's control FIFOs: enable/disable the events and wait for perf's "ack"
    def _control(self, cmd: str) -> None:
        os.write(self._ctl, cmd.encode() + b"\n")
        buf = b""
        deadline = time.monotonic() + self.timeout
        while b"ack" not in buf:
            r, _, _ = select.select([self._ack], [], [], 0.2)
            if r:
                buf += os.read(self._ack, 64)
                continue
            if self._proc is not None and self._proc.poll() is not None:
                raise FlamegraphError(f"perf record exited (status {self._proc.returncode}) before "
                                   f"acknowledging '{cmd}'{self._stderr_tail()}")
            if time.monotonic() > deadline:
                raise FlamegraphError(f"perf did not acknowledge '{cmd}' within {self.timeout:.0f} s"
                                   + self._stderr_tail())

    def _stderr_tail(self) -> str:
        if not self._tmp:
            return ""
        try:
            lines = [ln for ln in Path(self._tmp, "perf.log").read_text().splitlines() if ln.strip()]
        except OSError:
            return ""
        return f": {lines[-1].strip()}" if lines else ""

    def start(self, case_id: str) -> None:
        if self._proc is not None:
            raise RuntimeError("Profiler already recording")
        perf = _perf_bin()
        event = self.event or default_event()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._tmp = tempfile.mkdtemp(prefix=f".perf-{safe_id(case_id)}-", dir=self.out_dir)
        ctl, ack = os.path.join(self._tmp, "ctl"), os.path.join(self._tmp, "ack")
        os.mkfifo(ctl)
        os.mkfifo(ack)
        # O_RDWR: opening a FIFO this way never blocks, even before perf opens its end
        self._ctl = os.open(ctl, os.O_RDWR)
        self._ack = os.open(ack, os.O_RDWR)
        target = ["-C", ",".join(map(str, self.cpus))] if self.cpus is not None else ["-a"]
        cmd = [perf, "record", *target, "-g", "-F", str(self.freq), "-e", event, NO_BPF_EVENT, "-D", "-1",
               "--control", f"fifo:{ctl},{ack}", "-o", os.path.join(self._tmp, "perf.data")]
        with open(os.path.join(self._tmp, "perf.log"), "w") as log:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                          preexec_fn=_die_with_parent)
        self._case = case_id
        try:
            self._control("enable")
        except BaseException:
            self._abort()
            raise

    def _abort(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
        self._proc = None
        for fd in (self._ctl, self._ack):
            if fd >= 0:
                os.close(fd)
        self._ctl = self._ack = -1
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
        self._tmp = None
        self._case = None

    def stop(self) -> Path:
        """Stop recording; write and return the case's flame graph (case-<id>.svg)."""
        if self._proc is None or self._tmp is None or self._case is None:
            raise RuntimeError("Profiler is not recording")
        proc, tmp, case_id = self._proc, self._tmp, self._case
        try:
            self._control("disable")
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                raise FlamegraphError(f"perf record did not stop within {self.timeout:.0f} s") from None
            data = os.path.join(tmp, "perf.data")
            if proc.returncode not in (0, -signal.SIGINT) or not os.path.exists(data):
                raise FlamegraphError(f"perf record failed (exit {proc.returncode}){self._stderr_tail()}")
            cp = subprocess.run([_perf_bin(), "script", "-i", data, "--no-inline"],
                                capture_output=True, text=True, timeout=600)
            if cp.returncode != 0:
                raise FlamegraphError(f"perf script failed: {cp.stderr.strip()[-300:]}")
            folded = collapse(cp.stdout)
            samples = sum(folded.values())
            svg = self.out_dir / f"case-{safe_id(case_id)}.svg"
            where = f"CPUs {','.join(map(str, self.cpus))}" if self.cpus is not None else "all CPUs"
            _write_atomic(svg.with_suffix(".folded"), folded_text(folded))
            _write_atomic(svg, flamegraph_svg(
                folded, title=f"case {case_id}",
                subtitle=f"perf record -g -F {self.freq} -e {self.event or default_event()} on {where}: "
                         f"{samples} samples"))
            if self.keep_data:
                os.replace(data, svg.with_suffix(".perf.data"))
            self.last_svg = svg
            return svg
        finally:
            self._abort()

    @contextmanager
    def case(self, case_id: str) -> Iterator[None]:
        """Record while the block runs; the flame graph is written when it ends without an error
        (after an error, perf is stopped and its data discarded)."""
        self.start(case_id)
        try:
            yield
        except BaseException:
            self._abort()
            raise
        self.stop()

    def close(self) -> None:
        """Stop perf if it is still running (no flame graph)."""
        self._abort()

    def __enter__(self) -> "Profiler":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
