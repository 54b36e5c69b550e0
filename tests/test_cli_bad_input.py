"""Every `gtplab` command with bad input (issue 35): one line, never a traceback, before anything is built.

The commands are found in the argparse parser (gtplab.cli.build_parser), so a new subcommand or option
is covered without editing this file: each (sub)command gets an unknown option; each option is
classified by its type, metavar or name (numeric, duration, path read or written, URL, HOST:PORT,
K=V list, lab name) and gets the bad values of its class. Each case runs the real command line
(.venv/bin/gtplab, a subprocess with a deadline) and must exit 2 (3, the results-write status of
gtplab.errors.ResultsWriteError, for an unwritable or full output), not by a signal, with no
"Traceback" and one line of error (after argparse's usage lines, which argparse prints before its
own one-line error), naming the option, the value or the path it refuses. No lab may be left behind:
each case has its own GTPLAB_RUN_DIR, whose labs/ must be empty afterwards, and
test_no_lab_left_behind compares `ip netns list` around the whole file.

The cases run concurrently, once, in a module fixture (each still its own test id); every other
argument is a valid, harmless baseline (ports nothing listens on, outputs in a temporary directory,
a lab config that builds nothing when refused), so the refusal can only come from the bad value.
Also: `pgwu` (dataplane/pgwu) with bad numeric options, and SIGINT while gtplab is still importing.
A file ./setup.sh builds missing from the tree is not an option value: tests/test_cli_not_built.py.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from gtplab.cli import build_parser
from tests.lib import REPO, UNDECIDED
from tests.lib.synthetic_results import sweep_cases, write_results

GTPLAB = str(REPO / ".venv/bin/gtplab")
PGWU = str(REPO / "dataplane/pgwu")
DEADLINE_S = 15          # a refusal takes 1-6 s; a case that reaches its deadline got past the checks
WORKERS = 4

# Valid, harmless arguments each command gets besides the one under test (overridden by it), so that
# the bad value is the only thing wrong; a command without an entry gets none. Placeholders: {tmp} is
# the case's own directory, {results} a synthetic sweep results directory, {free} a port nothing
# listens on.
BASELINE: dict[tuple[str, ...], dict[str, str | None]] = {
    ("monitor", "up"): {"--state-dir": "{tmp}/state", "--data-dir": "{tmp}/data", "--prometheus-port": "{free}",
                        "--pushgateway-port": "{free}", "--node-exporter-port": "{free}", "--no-pgwu": None,
                        "--timeout": "5"},
    ("monitor", "down"): {"--state-dir": "{tmp}/state"},
    ("monitor", "status"): {"--state-dir": "{tmp}/state"},
    ("push",): {"--gateway": "http://127.0.0.1:{free}", "--timeout": "2"},
    ("export",): {"--prometheus": "http://127.0.0.1:{free}", "-o": "{tmp}/out.csv", "--timeout": "2"},
    ("lab", "up"): {"--name": "{lab}", "--dut": "none", "--share-cpus": None},
    ("lab", "down"): {"--name": "{lab}"},
    ("lab", "status"): {"--name": "{lab}"},
    ("bearers",): {"--profile": "uplink", "-o": "{tmp}/bearers.txt"},
    ("report",): {"-o": "{tmp}/report"},
    ("sweep",): {"--no-scale": None, "--sizes": "128", "--directions": "uplink", "--flow-modes": "single",
                 "--checksum": "off", "--rate-mode": "fixed", "--rate": "1000", "--duration": "1",
                 "--dut": "fwd", "--no-latency": None, "--pcap-limit": "0", "--out": "{tmp}/out",
                 "--share-cpus": None},
    ("pfcp",): {"--upf": "127.0.0.1:{free}", "--n3": "127.0.0.2", "--n6": "127.0.0.3",
                "--local": "127.0.0.1", "--listen-port": "0", "-o": "{tmp}/provisioned.txt",
                "--duration": "1"},
    ("pairs",): {"--lab-config": "example-trex", "-o": "{tmp}/trials.jsonl"},
    ("upftest",): {"-o": "{tmp}/out", "--share-cpus": None},
    ("conformance",): {"-o": "{tmp}/out", "--lab-config": "embedded", "--cases": "echo"},
}

# Values of a required positional by its dest (else its first choice, else the results directory),
# and what a command's positionals must be for an option to apply (upftest's --sizes are policing's,
# its directories table's; conformance's directories follow `table`).
POSITIONAL = {"results_dir": "{results}"}
POSITIONAL_OF = {("upftest",): {"kind": "policing"}}
POSITIONAL_FOR = {("upftest", "dirs"): {"kind": "table"}}
PREFIX = {("conformance", "what"): ["table"]}

# Options that take a number or a list of numbers, but as a string (type=int/float ones are found).
NUMERIC_DESTS = {"rate", "sizes", "bursts"}
DURATION_DESTS = {"scrape_interval", "retention", "step", "rate_window"}
TIME_DESTS = {"start", "end"}
ZERO_ALLOWED = {("sweep", "pcap_limit"): "0 captures nothing", ("pfcp", "duration"): "0 holds until Ctrl-C",
                ("pfcp", "listen_port"): "0 is any free port", ("pfcp", "qfi"): "QFI 0 is a QFI"}
# Path-like values the command reads (a nonexistent one and a binary file are refused).
INPUT_PATH_DESTS = {"spec", "lab_config", "trex", "results_dir", "other_dirs", "dirs"}
# Paths the command writes (an unwritable or full one is refused, exit 2 or 3).
OUTPUT_DESTS = {"output", "out"}
OUTPUT_DESTS_OF = {("monitor", "up"): {"state_dir", "data_dir"}}
URL_DESTS = {"gateway", "pushgateway", "push", "prometheus"}
HOSTPORT_METAVARS = {"HOST[:PORT]", "ADDR:PORT", "HOST:PORT"}
KV_METAVARS = {"K=V[,K=V...]", "KEY=V,..", "KNOB=VALUE"}
LAB_NAME_DESTS = {"lab", "name"}

# (command path, dest, value): not bad input for that command, with why.
NOT_BAD = {
    ("lab", "up", "name", "nosuchlab0"): "lab up makes the lab it names",
    ("sweep", "pushgateway", "http://127.0.0.1:{free}"): "docs/sweep.md: a gateway that is down costs one warning, "
                                                          "never the sweep (the soak test sweeps through outages)",
    ("sweep", "pushgateway", "http://127.0.0.1:{hang}"): "the same",
    ("sweep", "rate", "99999999999"): "a fixed rate above what the generator sends: it sends what it can",
}

# (command path, dest, value): another documented exit status than 2 for this bad input.
CODES = {
    ("push", "gateway", "http://127.0.0.1:{free}"): (1,),   # docs/monitoring.md: 1 if any case was not pushed
    ("push", "gateway", "http://127.0.0.1:{hang}"): (1,),
}


@dataclass
class Case:
    id: str
    argv: list[str]
    mentions: list[str]                 # the error line names one of these (case-insensitive)
    codes: tuple[int, ...] = (2,)
    xfail: str | None = None


def _commands(p: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(path, parser) of every command and subcommand under p, p's own included."""
    yield path, p
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sp in a.choices.items():
                yield from _commands(sp, path + (name,))


def _is_leaf(p: argparse.ArgumentParser) -> bool:
    return not any(isinstance(a, argparse._SubParsersAction) for a in p._actions)


def _flag(a: argparse.Action) -> str:
    return max(a.option_strings, key=len)


def _numeric(a: argparse.Action) -> bool:
    t = a.type
    return (t in (int, float) or a.dest in NUMERIC_DESTS
            or getattr(t, "__name__", "").strip("_") in {"port", "positive", "positive_int", "nonneg"})


def _bad_values(path: tuple[str, ...], a: argparse.Action) -> list[tuple[str, str, tuple[int, ...]]]:
    """(label, value, exit codes) of the bad values of option/positional a."""
    d = a.dest
    if _numeric(a):
        # argparse's int() refuses all text alike; float() and a string-typed option take more
        vals = ["-1", "99999999999", "abc"] + ([] if a.type is int else ["nan", "inf", ""])
        if (path[0], d) not in ZERO_ALLOWED:
            vals.insert(0, "0")
        return [(v, v, (2,)) for v in vals]
    if d in DURATION_DESTS:
        return [(v, v, (2,)) for v in ("-1s", "0s", "nans", "abc", "1e999s", "")]
    if d in TIME_DESTS:
        return [(v, v, (2,)) for v in ("abc", "now-nan", "now-1e999h")]
    if d in URL_DESTS:
        return [("refused", "http://127.0.0.1:{free}", (2,)), ("hanging", "http://127.0.0.1:{hang}", (2,)),
                ("malformed", "http//nowhere", (2,))]
    if a.metavar in HOSTPORT_METAVARS or (a.metavar or "").endswith(":PORT"):
        return [(v, v, (2,)) for v in ("127.0.0.1:99999", "127.0.0.1:-1", "127.0.0.1:abc", ":")]
    if a.metavar in KV_METAVARS:
        return [(v, v, (2,)) for v in ("nosuchkey=1", "novalue", "flows=nan", "flows=-1")]
    outputs = OUTPUT_DESTS | OUTPUT_DESTS_OF.get(path, set())
    if d in outputs:
        return [("under-a-file", "/dev/null/x", (2, 3)), ("read-only", "{ro}/x", (2, 3)),
                ("full", "{full}/x", (2, 3))]
    if d in INPUT_PATH_DESTS or re.search(r"FILE|DIR|TARBALL", a.metavar or ""):
        return [("nonexistent", "/nonexistent/gtplab-bad-input", (2,)), ("binary", "{binary}", (2,))]
    if d in LAB_NAME_DESTS and a.option_strings:
        return [("nonexistent", "nosuchlab0", (2,)), ("bad-name", "Bad/Name!", (2,))]
    return []


# Bad inputs refused wrongly by gtplab/upftests/cli.py (case id: why): none since issue 35's fixes
# (--lab looked up, --sizes ''/--bursts '' refused, --push probed, all before anything is built).
UPFTESTS_XFAIL: dict[str, str] = {}


def _fill(p: argparse.ArgumentParser, path: tuple[str, ...], under_test: argparse.Action | None, value: str):
    """The argv of path with the baseline, the required positionals and under_test set to value."""
    opts = dict(BASELINE.get(path, {}))
    pos: list[str] = []
    given = {**POSITIONAL_OF.get(path, {}), **(POSITIONAL_FOR.get((*path, under_test.dest), {}) if under_test else {})}
    for a in p._actions:
        if a.option_strings or isinstance(a, argparse._SubParsersAction):
            continue
        if a is under_test:
            pos += PREFIX.get((*path, a.dest), []) + [value]
        elif a.dest in given:
            pos.append(given[a.dest])
        elif a.nargs in (None, "+", 1):
            pos.append(POSITIONAL.get(a.dest) or (str(list(a.choices)[0]) if a.choices else "{results}"))
    if under_test is not None and under_test.option_strings:
        for s in under_test.option_strings:
            opts.pop(s, None)
        opts[_flag(under_test)] = value
    argv = list(path) + pos
    for k, v in opts.items():
        argv += [k] if v is None else [f"{k}={v}"] if k.startswith("--") else [k, v]
    return argv


def _cases() -> list[Case]:
    cases = []
    for path, p in _commands(build_parser()):
        name = " ".join(path) or "(top)"
        if not _is_leaf(p):             # before a valid subcommand line
            lpath, leaf = next((q, sp) for q, sp in _commands(p, path) if _is_leaf(sp))
            cases.append(Case(f"{name}: unknown option",
                              list(path) + ["--no-such-option"] + _fill(leaf, lpath, None, "")[len(path):],
                              ["--no-such-option"]))
            continue
        cases.append(Case(f"{name}: unknown option", _fill(p, path, None, "") + ["--no-such-option"],
                          ["--no-such-option"]))
        for a in p._actions:
            if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) or a.nargs == 0:
                continue
            for label, value, codes in _bad_values(path, a):
                if (*path, a.dest, value) in NOT_BAD:
                    continue
                flag = _flag(a) if a.option_strings else a.dest
                cid = f"{name}: {flag} {label}"
                mentions = [value, *a.option_strings]
                if not a.option_strings:         # argparse names a positional by its metavar
                    mentions += [a.dest, str(a.metavar or "")]
                if "=" in value:                 # K=V: the key is the option the profile refuses
                    mentions.append(value.split("=")[0])
                if not value:                    # nothing to quote but the option, or its spec key
                    mentions += [a.dest, a.dest.replace("_", "-")]
                cases.append(Case(cid, _fill(p, path, a, value), [m for m in mentions if m],
                                  CODES.get((*path, a.dest, value), codes), UPFTESTS_XFAIL.get(cid)))
    return cases


CASES = _cases()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The shared inputs: a synthetic results directory, a binary file, a read-only and a full mount,
    a TCP port that accepts connections and never answers, a port that refuses them."""
    top = tmp_path_factory.mktemp("bad-input")
    results = write_results(top / "results", sweep_cases())
    binary = top / "binary.yaml"
    binary.write_bytes(bytes(range(256)) * 16)
    ro, full = top / "ro", top / "full"
    ro.mkdir()
    full.mkdir()
    mounted = []
    hang = socket.socket()
    hang.bind(("127.0.0.1", 0))
    hang.listen(0)                      # never accepted: connects complete (backlog) or hang, nothing is read
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "gtplab-bad-input", str(ro)], check=True)
        mounted.append(ro)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "gtplab-bad-input", str(full)], check=True)
        mounted.append(full)
        with contextlib.suppress(OSError), open(full / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        yield {"results": str(results), "binary": str(binary), "ro": str(ro), "full": str(full),
               "hang": str(hang.getsockname()[1]), "top": top}
    finally:
        hang.close()
        for m in mounted:
            subprocess.run(["umount", str(m)], check=False)


@dataclass
class Outcome:
    rc: int | None
    stderr: str
    seconds: float
    left: list[str]
    subst: dict


def _run_case(case: Case, world: dict) -> Outcome:
    tmp = Path(tempfile.mkdtemp(dir=world["top"], prefix="case-"))
    run_dir = tmp / "run"
    subst = {**world, "tmp": str(tmp), "lab": "bi" + os.urandom(3).hex(), "free": str(_free_port())}
    argv = [s.format(**subst) for s in case.argv]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GTPLAB_") and k not in ("TREX_SERVER",)}
    env.update(GTPLAB_SHARE_CPUS="1", GTPLAB_RUN_DIR=str(run_dir))
    t0 = time.monotonic()
    proc = subprocess.Popen([GTPLAB, *argv], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)      # the command tears down what it built
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
        err = f"(no answer in {DEADLINE_S} s: SIGTERM)\n{err}"
        rc = None
    else:
        rc = proc.returncode
    seconds = time.monotonic() - t0
    labs = run_dir / "labs"
    left = sorted(p.name for p in labs.iterdir()) if labs.is_dir() else []
    for f in left:                                   # remove what a case left, then fail it
        subprocess.run([GTPLAB, "lab", "down", "--name", Path(f).stem, "--force"], env=env,
                       capture_output=True, timeout=120)
    if argv[:2] == ["monitor", "up"]:
        subprocess.run([GTPLAB, "monitor", "down", "--state-dir", str(tmp / "state")], env=env,
                       capture_output=True, timeout=60)
    return Outcome(rc, err, seconds, left, {k: v for k, v in subst.items() if isinstance(v, str)})


@pytest.fixture(scope="module")
def netns_before():
    return set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())


@pytest.fixture(scope="module")
def outcomes(request, world, netns_before):
    """Every selected case of this module, run once, concurrently: {case id: Outcome}."""
    wanted = [it.callspec.params["case"] for it in request.session.items
              if it.module is request.module and hasattr(it, "callspec") and "case" in it.callspec.params]
    with ThreadPoolExecutor(WORKERS) as ex:
        return dict(zip([c.id for c in wanted], ex.map(lambda c: _run_case(c, world), wanted)))


def _error_lines(stderr: str) -> list[str]:
    """stderr without argparse's usage block (usage: ... up to the `prog: error:` line)."""
    lines = stderr.rstrip("\n").splitlines()
    if lines and lines[0].startswith("usage:"):
        for i, line in enumerate(lines):
            if ": error: " in line:
                return lines[i:]
    return lines


@pytest.mark.lab            # mounts a read-only and a full tmpfs; a command that got past its checks builds a lab
@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=[pytest.mark.xfail(strict=True, reason=c.xfail)]
                                               if c.xfail else []) for c in CASES])
def test_bad_input(case, outcomes):
    o = outcomes[case.id]
    shown = f"gtplab {' '.join(case.argv)}\n--- rc {o.rc} in {o.seconds:.1f} s, stderr:\n{o.stderr}"
    assert "Traceback" not in o.stderr, shown
    assert not o.left, f"lab(s) left behind: {o.left}\n{shown}"
    assert o.rc in case.codes, shown
    lines = _error_lines(o.stderr)
    assert len(lines) == 1, f"want one line of error:\n{shown}"
    named = [m.format(**o.subst) for m in case.mentions if m]
    assert any(re.search(rf"(?<!\w){re.escape(m)}(?!\w)", lines[0], re.I) for m in named), \
        f"the error names none of {named}:\n{shown}"


def _lab_of(ns: str) -> str:
    return ns.split("-")[1] if ns.count("-") >= 2 else ""


@pytest.mark.lab
def test_no_lab_left_behind(netns_before, outcomes):
    """No namespace appeared during the file's cases that is not a lab of another run (its state file in
    the shared run directory)."""
    after = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
    others = {p.stem for p in Path("/run/gtplab/labs").glob("*")}
    new = sorted(ns for ns in after - netns_before
                 if ns.startswith("gtplab-") and _lab_of(ns) not in others)
    assert not new, f"namespaces left behind: {new}"


# ---- SIGINT while gtplab starts ---------------------------------------------------------------------

@pytest.mark.parametrize("delay", [0.1, 0.2, 0.4])
def test_sigint_while_importing(delay):
    """Ctrl-C while the command is still importing (sweep pulls in the lab, the engine, the socket DUT):
    one line, exit 130, no traceback."""
    proc = subprocess.Popen([GTPLAB, "sweep", "--dut", "socket", "--help"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    if proc.returncode == 0:
        pytest.skip(f"{delay} s: the command was done before SIGINT")
    if proc.returncode == -signal.SIGINT or ("Traceback" in err and "gtplab" not in err):
        # on a loaded host the signal can land in the interpreter's own start-up (site, encodings),
        # before any of gtplab's code runs: Python's, not gtplab's, and this host cannot decide
        pytest.skip(f"{UNDECIDED} SIGINT after {delay} s arrived in Python's start-up, before gtplab's code "
                    f"(exit {proc.returncode}, last line {err.strip().splitlines()[-1] if err.strip() else 'none'!r})")
    assert "Traceback" not in err, err
    assert proc.returncode == 130, err
    assert err.strip() == "gtplab: interrupted", err


# ---- pgwu (dataplane/pgwu) ----------------------------------------------------------------------------

def _pgwu_numeric_options() -> list[tuple[str, str]]:
    """(command, --option) of every pgwu option whose help names a number (N, S, PORT, MS, ...)."""
    if not os.access(PGWU, os.X_OK):
        return []
    out = []
    top = subprocess.run([PGWU, "--help"], capture_output=True, text=True).stdout
    cmds = re.findall(r"^  ([a-z]+)\s{2,}", top.split("Commands:")[1].split("Common options:")[0], re.M)
    for cmd in cmds:
        if cmd == "help":
            continue
        h = subprocess.run([PGWU, cmd, "--help"], capture_output=True, text=True)
        for opt, meta in re.findall(r"(--[a-z][a-z0-9-]*)[ =]([A-Z][A-Z_]*)\b", h.stdout + h.stderr):
            if meta in {"N", "S", "MS", "US", "PORT", "SECONDS", "COUNT", "BYTES", "PPS", "KBPS", "MTU", "NUM",
                        "QFI", "MAX"} and (cmd, opt) not in out:
                out.append((cmd, opt))
    return out


PGWU_OPTS = _pgwu_numeric_options()


@pytest.mark.lab            # pgwu runs as root, on /sys/fs/bpf
@pytest.mark.parametrize("value", ["-1", "99999999999999999999", "nan", "abc", ""])
@pytest.mark.parametrize("cmd,opt", PGWU_OPTS, ids=[f"{c} {o}" for c, o in PGWU_OPTS])
def test_pgwu_bad_number(cmd, opt, value, tmp_path):
    """pgwu refuses a bad number with exit 2, not by crashing, before it touches a pin dir."""
    pin = f"/sys/fs/bpf/gtplab-bi-{os.urandom(3).hex()}"
    try:
        cp = subprocess.run([PGWU, "-d", pin, cmd, f"{opt}={value}"], capture_output=True, text=True,
                            timeout=20, stdin=subprocess.DEVNULL)
    finally:
        if os.path.exists(pin):
            subprocess.run([PGWU, "-d", pin, "unload"], capture_output=True, timeout=30)
    assert cp.returncode == 2, f"rc {cp.returncode}: {cp.stderr}"
    assert not os.path.exists(pin)
