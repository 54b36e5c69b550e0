"""`gtplab sweep`: frame sizes x directions x flows x checksum through the PGW-U, into a results dir.

    gtplab sweep                                    # the default sweep on the embedded lab
    gtplab sweep --sizes 64,1518 --directions uplink --goals rfc2544
    gtplab sweep --search time_budget=20,min_load=50000 --goals '[ndr, {preset: pdr, loss_ratio: 0.001}]'
    gtplab sweep --backend trex --lab-config my-lab.yaml --spec my-sweep.yaml

The spec (gtplab/measure/sweeps/default.yaml, or --spec FILE, then CLI overrides) is checked completely
before anything starts (gtplab/measure/plan.py), and so is the choice of lab and generator
(gtplab/traffic/backend.py, choose). The results directory is claimed (gtplab.results.store.claim:
one sweep writes it) before the lab is built. Each case installs its bearers (from the profile's
tunables, as `gtplab bearers` writes them), runs one trial at a fixed rate or an MLRsearch of the
spec's goals, NDR and PDR0.5 by default, and the latency trials at shares of the PDR it found
(gtplab/measure/runner.py, gtplab/measure/search.py), checks packet conservation, and is written to
RESULTS_DIR (docs/results.md) before the next case starts, then pushed to the Pushgateway if one is
given. docs/sweep.md describes the spec and the method. Registered by gtplab.cli;
docs/architecture.md follows one case through.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import errno
import ipaddress
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid as uuidlib
from pathlib import Path
from typing import Any

from gtplab.dut.dataplane import pgwu_binary
from gtplab.errors import ResultsWriteError, Terminated, UserError
from gtplab.lab import config as labconfig
from gtplab.measure import mlrsearch as mlr
from gtplab.measure import search
from gtplab.measure.caserecord import CASE_KEYS, CaseRecord
from gtplab.measure.plan import DEFAULT_SPEC, RATE_MODES, apply_overrides, common, load_spec, plan
from gtplab.measure.plan import goals as goals_of
from gtplab.measure.pairs import PairsBackend, PairsSweepRunner
from gtplab.measure.runner import Runner
from gtplab.observe import flamegraph
from gtplab.observe.host import layout_notes, notes as host_notes, summary as host_summary
from gtplab.rates import line_rate_pps, mult_pps, wire_rates
from gtplab.results import store as results
from gtplab.results.gateway import check_gateway_url
from gtplab.results.pusher import Pusher
from gtplab.results.report import build_report
from gtplab.traffic import backend


# ------------------------------------------------------------------------------------------ progress

class Progress:
    """One updating line on stderr when it is a terminal, plain lines otherwise (CI logs)."""

    def __init__(self, total: int, stream=None):
        self.total = total
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.case = ""
        self.i = 0
        self._last = 0

    def start_case(self, i: int, text: str) -> None:
        self.i, self.case = i, text
        self.update("starting")

    def update(self, what: str) -> None:
        line = f"[{self.i}/{self.total}] {self.case}: {what}"
        if self.tty:
            cols = 120
            self.stream.write("\r" + line[:cols].ljust(self._last))
            self._last = min(len(line), cols)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def done(self, text: str) -> None:
        if self.tty:
            self.stream.write("\r" + " " * self._last + "\r")
        self.stream.write(text + "\n")
        self.stream.flush()


def _rate(pps: float | None) -> str:
    if pps is None:
        return "max"
    return f"{pps / 1e6:.3f} Mpps" if pps >= 1e6 else f"{pps / 1e3:.1f} kpps"


# ------------------------------------------------------------------------------------------ run

TRIAL_KEYS = ("phase", "rate_asked", "rate_asked_pps", "duration_s", "offered_pps", "rx_pps", "tx_packets",
              "rx_packets", "loss_ratio", "generator_bound", "limit", "loss", "conservation", "search",
              "latency_point", "latency_us", "host", "rx_path", "settle",
              # several generator pairs (gtplab.measure.pairs.sweep_trial): the even split, each pair's figures
              "rate_split", "start_skew_s", "pairs")


def run_case(runner, p, spec: dict, cfg, pcap_dir: Path | None, progress: Progress | None) -> dict:
    """measure_case's record as JSON data (CaseRecord.to_dict)."""
    return measure_case(runner, p, spec, cfg, pcap_dir, progress).to_dict()


def measure_case(runner, p, spec: dict, cfg, pcap_dir: Path | None, progress: Progress | None) -> CaseRecord:
    """Run one case; returns its results record (docs/results.md plus trials, notes, conservation):
    one trial at a fixed rate, or an MLRsearch of the spec's goals (gtplab.measure.search) and the
    latency trials at shares of the PDR it found."""
    c = common()
    prep = runner.prepare(p)
    notes = []
    if p.actual_size != p.frame_size:
        notes.append(f"requested {p.frame_size} B is below the {p.direction} minimum "
                     f"{c.min_frame_size(p.direction, ip=p.ip, n3=p.n3)} B ("
                     + (("GTP-U + " if p.n3 == "4" else "GTP-U over IPv6 + ") if p.direction == "uplink" else "")
                     + f"inner IPv{'4' if p.ip == '4' else '6'}/UDP + FCS): ran {p.actual_size} B")
    if p.latency and not prep.latency:
        notes.append(f"no latency: a {p.actual_size} B {p.direction} frame leaves less than "
                     f"{c.STATS_PAYLOAD} payload bytes for the latency trailer")
    pairs = len(getattr(prep, "pairs", None) or [])
    if pairs:
        notes.append(f"{pairs} generator port pairs driven together: every load is their aggregate, split evenly "
                     f"(each pair load/{pairs}, trials' rate_split); conservation over their sums; each trial's "
                     "pairs has each pair's figures")
    pcap = str(pcap_dir / f"case-{p.case_id}-port{prep.rx_port}.pcap") if pcap_dir and spec["pcap_limit"] else None
    first = [True]

    def trial(pps, duration):
        if progress:
            progress.update(f"trial at {_rate(pps)}, {duration:g} s")
        t = runner.trial(prep, pps, duration, capture=pcap if first[0] else None,
                         capture_limit=max(1, spec["pcap_limit"]))
        first[0] = False
        if progress:
            progress.update(f"offered {_rate(t['offered_pps'])}, received {_rate(t['rx_pps'])}, "
                            f"loss {t['loss_ratio'] or 0:.4%}" + (" (disturbed)" if search.is_disturbed(t) else ""))
        return t

    extra: dict[str, Any] = {}
    if p.rate_mode == "fixed":
        pps = float(p.rate) if isinstance(p.rate, (int, float)) else None
        if pps is None and p.rate != "100%":
            pps = mult_pps(p.rate, p.actual_size, cfg.port_speed_bps)
            if pps is None:
                raise UserError(f"rate {p.rate!r}: a factor means nothing for a sweep; give pps, bps or %")
        best = trial(pps, p.duration)
        best["phase"] = "fixed"
        trials, status = [best], "fixed rate"
        extra = {"limit": best.get("limit"), "generator_bound": bool(best.get("generator_bound")),
                 "ndr_pps": None, "ndr": wire_rates(None, p.actual_size)}
        cost_load = best["offered_pps"]
    else:
        trials, best, status, extra = _search_case(trial, p, spec, cfg, prep, notes, progress)
        cost_load = extra["goals"][extra["goal"]]["lower_pps"]
    # the DUT's costs per packet, apart from the search: no search trial pays for bpf_stats, and the
    # reference forwarder swapped in at the same load gives the DUT's cost above it (Runner.case_costs)
    cost = runner.case_costs(prep, cost_load)
    notes += cost["notes"]
    paid = sum(bool((t.get("dut") or {}).get("bpf_stats")) for t in trials)
    if paid:
        notes.append(f"bpf_stats was on in {paid} of {len(trials)} trial(s): another process on this host "
                     "held BPF_ENABLE_STATS (it is machine-wide), and every packet of those paid for the run-time "
                     "accounting (cost.bpf_stats_ns_per_packet)")
    if best["dut"].get("ns_per_packet") is None:
        best["dut"] = {**best["dut"], "ns_per_packet": cost["xdp_ns_per_packet"]}
    rec = CaseRecord(
        case_id=p.case_id, direction=p.direction, frame_size=p.actual_size,
        requested_frame_size=p.frame_size, flows=p.flows, flow_mode=p.flow_mode,
        **({"pairs": pairs} if pairs else {}),
        order=p.order, ip=p.ip, n3=p.n3,
        checksum=p.checksum, bearers=p.n_bearers, rate_mode=p.rate_mode,
        duration_s=best.get("duration_s", p.duration), **{k: best[k] for k in CASE_KEYS},
        rate_asked=best["rate_asked"],
        status=status,
        **extra,
        conservation_ok=all(t["conservation"]["ok"] for t in trials),
        **background_of(trials),
        trials=[{k: t[k] for k in TRIAL_KEYS if k in t} for t in trials],
        rx_path=rx_path_of(best, trials),
        host=host_summary(trials),
        cost=cost,
        tunables=prep.tunables,
        pcap=os.path.relpath(pcap, pcap_dir.parent) if pcap and pcap_dir else None,
        notes=notes,
        end_timestamp=time.time(),
    )
    # a searched case's verdict notes its disturbed trials (and what the search did with them, with the
    # reasons); host_notes adds those of a fixed-rate trial and the CPUs shared with another lab
    rec.notes += host_notes(rec.host if p.rate_mode == "fixed" else {**rec.host, "disturbed": 0})
    if any(t["conservation"].get("scope", "").startswith("generator only") for t in trials):
        rec.notes.append("packet conservation on the generator's side only (dut.counters: none)")
    if not rec.conservation_ok:
        bad = [t["conservation"] for t in trials if not t["conservation"]["ok"]]
        rec.notes.append("packet conservation failed: " + "; ".join(e for b in bad for e in b["errors"]))
    rec.premises = case_premises(rec.to_dict(), trials)
    rec.decided = all(x["held"] for x in rec.premises)
    return rec


TRIAL_HOOK_TIMEOUT_S = 30.0


def trial_hook(cmd: str):
    """--on-trial-start: Runner.on_start running cmd (a shell command) to its end."""
    def run() -> None:
        try:
            cp = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=TRIAL_HOOK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise UserError(f"--on-trial-start: {cmd!r} still running after {TRIAL_HOOK_TIMEOUT_S:.0f} s") from None
        if cp.returncode:
            last = (cp.stderr.strip().splitlines() or [""])[-1]
            raise UserError(f"--on-trial-start: {cmd!r} exited {cp.returncode}: {last}")
    return run


def background_of(trials: list[dict]) -> dict:
    """{"background": {place: {kind: frames}}} summed over the trials that measured it (the
    engine's: frames that were not the test's, conservation.Background), {} when none did."""
    seen = [b for t in trials if (b := (t.get("conservation") or {}).get("background")) is not None]
    if not seen:
        return {}
    out: dict = {}
    for b in seen:
        for place, kinds in b.items():
            d = out.setdefault(place, {})
            for k, n in (kinds or {}).items():
                d[k] = d.get(k, 0) + n
    return {"background": out}


def case_premises(rec: dict, trials: list[dict]) -> list[dict]:
    """What a case's result rests on, each with whether it held and its figures (issue 31.4): every
    packet of every trial located (conservation), the host leaving the lab's CPUs alone (no "host
    busy"), the DUT's counters read (not the generator's side only), the generator sending the load
    asked (not generator-bound). `decided` is false when one failed: a host-busy or generator-bound
    case claims nothing, an unbalanced one fails the sweep, a generator-only one says so in notes."""
    d = rec.get("disturbance") or {}
    bad = [t for t in trials if not t["conservation"]["ok"]]
    gen_only = sum(t["conservation"].get("scope", "").startswith("generator only") for t in trials)
    disturbed = d.get("disturbed") if d else sum(bool((t.get("host") or {}).get("disturbed")) for t in trials)
    sh = (rec.get("search") or {}).get("generator_short") or {}
    offered = ([t.get("offered_pps") for t in trials if t.get("offered_pps")] or [None])[-1]
    return [
        {"premise": "every packet located", "held": not bad,
         "figures": f"{len(bad)} of {len(trials)} trials unbalanced"},
        {"premise": "the DUT's counters read", "held": not gen_only,
         "figures": f"{gen_only} of {len(trials)} trials on the generator's side only"},
        {"premise": "the host left the lab's CPUs alone", "held": rec.get("limit") != search.HOST_BUSY,
         "figures": f"{disturbed or 0} of {d.get('trials', len(trials))} trials disturbed"},
        {"premise": "the generator sent the load asked", "held": not rec.get("generator_bound"),
         "figures": (f"short in {sh.get('short')} of {sh.get('trials')} trials" if sh.get("short") else
                     f"limit {rec.get('limit') or 'none'}, last offered {offered or 0:.0f} pps")},
    ]


def rx_path_of(best: dict, trials: list[dict]) -> dict | None:
    """The receive path to show for a case: that of the lowest-rate trial above the recorded one
    that lost packets (where the DUT's limit showed), with its rate; the recorded trial's when none
    did. None when the DUT's receive path is not read."""
    b = best.get("offered_pps") or 0
    lossy = [t for t in trials if t.get("loss_ratio") and t is not best and t.get("rx_path")
             and (t.get("offered_pps") or 0) > b]
    t = min(lossy, key=lambda x: x.get("offered_pps") or 0) if lossy else best
    if not t.get("rx_path"):
        return None
    return {**t["rx_path"], "trial_offered_pps": t.get("offered_pps"), "trial_loss_ratio": t.get("loss_ratio")}


def _search_case(trial, p, spec: dict, cfg, prep, notes: list[str], progress: Progress | None):
    """Rate mode search: max load, the MLRsearch of the spec's goals, the verdict, the latency loads.
    Returns (every trial in order, the recorded trial, status, the case's search fields)."""
    sr = spec["search"]
    top = search.max_load(trial, spec_max=sr["max_load"], cfg_max=cfg.max_rate_pps,
                          line_rate=line_rate_pps(cfg.port_speed_bps, p.actual_size) if cfg.max_rate_pps else None)
    cs = search.run(trial, goals_of(sr), min_load=sr["min_load"], max_load=top, time_budget=sr["time_budget"],
                    max_trials=sr["max_trials"], disturbed=sr["disturbed"])
    v = search.verdict(cs, p.actual_size)
    notes.extend(v.notes)
    trials = list(top.probes) + cs.trials
    if len(top.probes) > 1:
        notes.append(f"max load: {len(top.probes)} flat-out trials, the host disturbed "
                     f"{sum(search.is_disturbed(t) for t in top.probes)}")
    best = search.recorded_trial(cs)
    extra: dict[str, Any] = {
        "goal": v.claim_goal, "goal_rfc_code": v.goals[v.claim_goal]["rfc_code"], "goals": v.goals,
        "limit": v.limit,
        "generator_bound": v.limit in search.GENERATOR_LIMITS or v.limit == "max load",
        "ndr_pps": v.claim, "ndr": wire_rates(v.claim, p.actual_size),
        "search": {**cs.result.as_dict(trials=False), "max_load_source": top.source,
                   "goals": [g.code for g in cs.goals], "generator_short": v.shortfall},
        "disturbance": v.disturbance,
    }
    if spec["latency"] and prep.latency and sr["latency_at"]:
        def on_point(key, load):
            if progress:
                progress.update(f"latency at {key} % of the PDR: {_rate(load)}")
        lat, lt = search.latency_points(trial, cs, v, sr["latency_at"], duration=sr["latency_duration"],
                                        idle=sr["min_load"], on_point=on_point)
        extra["latency_pdr"] = lat
        if lat.get("note"):
            notes.append(f"latency: {lat['note']}")
        trials += lt
    return trials, best, v.status, extra


def _goal_name(code: str, g: dict) -> str:
    """A goal's short name with RFC 9971's dense code beside it, 'NDR [0.5f1d0l50e]' (mlr.label); from
    the goal's attributes for a record written before the code was stored."""
    return mlr.label(code, g.get("rfc_code") or mlr.dense_code(g.get("goal")))


def _goal_text(code: str, g: dict) -> str:
    """One goal of a case's result line: 'NDR [0.5f1d0l50e] 0.412 Mpps (upper 0.420, cond. 0.412)',
    irregular marked."""
    def m(x):
        return "none" if x is None else f"{x / 1e6:.3f}"
    code = _goal_name(code, g)
    if g["irregular"] == mlr.IRREGULAR_MAX_LOAD:
        return f"{code} >= {m(g['lower_pps'])} Mpps (irregular: max load is a lower bound)"
    if g["lower_pps"] is None:
        return f"{code} none (irregular: {search.IRREGULAR_SHORT.get(g['irregular'], g['irregular'])}, upper {m(g['upper_pps'])})"
    txt = f"{code} {m(g['lower_pps'])} Mpps (upper {m(g['upper_pps'])}, cond. {m(g['conditional_pps'])}"
    if g["irregular"]:
        txt += f"; irregular: {search.IRREGULAR_SHORT.get(g['irregular'], g['irregular'])}"
    return txt + ")"


def case_summary(rec: dict) -> str:
    """One line: the claim of a case per goal (with its code) and which side set it."""
    cpu = (rec.get("dut") or {}).get("cpu_ns_per_packet")
    cpu = f", DUT CPU {cpu:.0f} ns/pkt" if cpu else ""
    if rec.get("pairs"):
        return f"{rec['pairs']} pairs, " + case_summary({k: v for k, v in rec.items() if k != "pairs"})
    if rec["rate_mode"] == "fixed":
        return (f"offered {_rate(rec['offered_pps'])}, received {_rate(rec['rx_pps'])}, loss "
                f"{rec['loss_ratio'] or 0:.4%}, limit: {rec.get('limit') or 'none'}{cpu}")
    goals = rec.get("goals") or {}
    d = rec.get("disturbance") or {}
    n = len([t for t in rec["trials"] if t.get("phase") == "search"])
    line = "; ".join(_goal_text(code, g) for code, g in goals.items())
    lim = rec.get("limit")
    claim = _goal_name(rec["goal"], goals.get(rec["goal"]) or {}) if rec.get("goal") else None
    if lim == search.HOST_BUSY:
        line += f"; limit: {search.host_busy_text(d)}; nothing claimed"
    elif lim == "dut" and rec.get("ndr_pps"):
        r = rec["ndr"]
        line += f"; {claim} = {r['gbps_l1']:.2f} Gb/s L1 ({r['gbps_l2']:.2f} L2); limit: DUT"
    elif lim == "dut":
        why = (goals.get(rec["goal"]) or {}).get("irregular")
        line += (f"; limit: DUT, no {claim} "
                 + ("above min load" if why == mlr.IRREGULAR_MIN_LOAD else "found within the budget"))
    elif lim:
        sh = (rec.get("search") or {}).get("generator_short") or {}
        why = (f" (it sent less than the load asked in {sh['short']} of {sh['trials']} trials, "
               f"{sh['median_share']:.1%} of it)" if lim == "generator (transmit)" and sh.get("short") else "")
        line += f"; limit: {lim}{why}, no {claim} claimed"
    else:
        line += f"; limit: not found ({rec['status']})"
    line += f"; {n} trials" + (f" ({d['disturbed']} disturbed)" if d.get("disturbed") else "") + cpu
    lat = rec.get("latency_pdr") or {}
    pts = lat.get("points") or {}
    if pts:
        p99 = "/".join("-" if (pt.get("latency_us") or {}).get("p99") is None else f"{pt['latency_us']['p99']:.0f}"
                       for pt in pts.values())
        lat_goal = {"rfc_code": lat.get("rfc_code"), "goal": (goals.get(lat["goal"]) or {}).get("goal")}
        line += f"; latency p99 at {'/'.join(pts)} % of {_goal_name(lat['goal'], lat_goal)}: {p99} us"
    return line


def _results_dir(out: str | None, run_uuid: str) -> tuple[Path, results.Claim]:
    """The results directory, made, claimed for this run (gtplab.results.store.claim: a second sweep
    into it is refused, naming this one) and checked writable, before anything else is built."""
    d = Path(out) if out else Path("results") / run_uuid
    if d.exists() and not d.is_dir():
        raise ResultsWriteError(f"results directory {d} exists and is not a directory")
    if d.exists() and results.contents(d) and not (d / results.LOCK_FILE).exists():
        raise UserError(f"results directory {d} exists and is not empty (nothing is overwritten)")
    owner = {"run_uuid": run_uuid, "pid": os.getpid(), "host": socket.gethostname(),
             "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    try:
        cl = results.claim(d, owner)
    except results.ClaimError as e:
        raise UserError(str(e)) from None
    except OSError as e:
        raise ResultsWriteError(f"Couldn't write to results directory {d}: {e.strerror or e}") from None
    try:
        if results.contents(d):
            raise UserError(f"results directory {d} exists and is not empty (nothing is overwritten)")
        probe = d / f".gtplab-write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        cl.release()
        raise ResultsWriteError(f"Couldn't write to results directory {d}: {e.strerror or e}") from None
    except BaseException:
        cl.release()
        raise
    return d, cl


def _report(results_dir: Path) -> str | None:
    """Build the HTML report (gtplab.results.report); its path, or None when it could not be built:
    a report problem must not lose the sweep, whose results are written already."""
    try:
        out = build_report(str(results_dir))
    except Exception as e:
        print(f"gtplab sweep: report not built: {e}", file=sys.stderr)
        return None
    return str(out) if out else None


def _start_exporter(be, listen: str):
    """`pgwu metrics` for the lab's DUT, on listen (host netns: the pinned maps are global), for as long
    as the sweep runs, so a Prometheus scraping that address sees the DUT's counters live."""
    if be.lab is None:
        raise UserError("--pgwu-metrics serves the embedded lab's DUT; a real DUT runs its own exporter")
    proc = subprocess.Popen([str(pgwu_binary()), "-d", be.lab.pin_dir, "metrics", "--listen", listen],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise UserError(f"pgwu metrics on {listen} exited: {proc.stderr.read().strip()}")
        try:
            with socket.create_connection(tuple(listen.rsplit(":", 1)), timeout=0.5):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.terminate()
    raise UserError(f"pgwu metrics did not listen on {listen} within 10 s")


RESERVE, RESERVE_BYTES = ".gtplab-reserve", 32 << 10
_WRITE_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EFBIG}


def _sigterm(signum, frame):
    raise Terminated()


def _finally_steps(be, pusher, exporter, rdir: Path, run: dict, stop: dict, current: dict, done: int,
                   failed: int, t_start: float) -> None:
    """The end of a sweep, however it ends. Each step is guarded, and the lab's teardown (be.close)
    runs whatever failed before it; run.json then records how the run ended."""
    def step(what, fn):
        try:
            fn()
        except BaseException as e:      # noqa: BLE001 (a clean-up step never stops the next one)
            print(f"gtplab sweep: {what} failed: {e}", file=sys.stderr)

    if pusher:
        step("the last push", pusher.finish)
    if exporter:
        step("stopping pgwu metrics", lambda: (exporter.terminate(), exporter.wait(timeout=10)))
    step("tearing down the lab", be.close)
    if stop.get("interrupted") and current.get("pcap"):
        # the interrupted case's capture is kept, named as partial
        pc = Path(current["pcap"])
        if pc.exists():
            step("renaming the partial pcap", lambda: os.replace(pc, pc.with_suffix(".partial.pcap")))
    with contextlib.suppress(OSError):
        rdir.joinpath(RESERVE).unlink()
    if rdir.joinpath(results.RUN_FILE).exists():
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        run.update(elapsed_s=round(time.monotonic() - t_start, 1), cases_done=done,
                   conservation_failures=failed)
        if stop.get("interrupted"):
            run.update(interrupted={"signal": stop["signal"], "case": current.get("case"), "at": now})
        elif stop.get("stopped"):
            run.update(stopped={"why": stop["stopped"], "case": current.get("case"), "at": now})
        else:
            run.update(finished=now)
        step("writing run.json", lambda: results.write_run(rdir, run))


def without_unsendable(cases: list, skipped: list[dict], cfg, choose: bool | None = None) -> tuple[list, list[dict]]:
    """With TEIDs a UPF chose over PFCP (dut.pfcp.choose), the uplink profile sends them from a
    list kept in step with the bearer (--teid-file), which a random order cannot do: those uplink
    cases are skipped, with the reason in run.json's `skipped`. choose: as resolved at association;
    None (before it): only `choose: true` is known to CHOOSE, auto is decided by the UPF's FTUP, and
    do_sweep calls this again once the association says."""
    pf = cfg.dut.get("pfcp") or {}
    if choose is None:
        choose = pf.get("choose", "auto") is True
    if cfg.provision != "pfcp" or not choose:
        return cases, skipped
    keep, skip = [], list(skipped)
    for c in cases:
        if c.direction == "uplink" and getattr(c, "order", "seq") == "random" and c.flows > 1:
            skip.append({"direction": c.direction, "frame_size": c.frame_size, "case_id": c.case_id,
                         "note": "random bearer order with TEIDs the UPF chose (dut.pfcp.choose): the "
                                 "profile sends those only in seq order: skipped"})
        else:
            keep.append(c)
    return keep, skip


def within_capacity(cases: list, skipped: list[dict], cfg) -> tuple[list, list[dict]]:
    """The cases whose bearers the DUT can hold (lab config dut.max_bearers: eUPF takes 65,535
    sessions); the others are skipped, each with the reason in run.json's `skipped`."""
    cap = cfg.max_bearers
    if cap is None:
        return cases, skipped
    keep, skip = [], list(skipped)
    for c in cases:
        if c.n_bearers > cap:
            skip.append({"direction": c.direction, "frame_size": c.frame_size, "case_id": c.case_id,
                         "note": f"{c.n_bearers} bearers: the DUT holds at most {cap} (dut.max_bearers): skipped"})
        else:
            keep.append(c)
    return keep, skip


def check_pairs(args: argparse.Namespace, cfg, spec: dict, cases: list) -> bool:
    """Whether the sweep drives several generator port pairs (the lab config's generators:, through
    gtplab.measure.pairs.PairsSweepRunner); what it cannot do over them is refused here, in one line,
    before anything is built (docs/ansible.md, "Several generator port pairs")."""
    gens = cfg.generators
    if len(gens) < 2:
        return False
    head = f"lab config {cfg.path}: {len(gens)} generator pairs: "
    refused = [
        ((args.backend or cfg.backend) != "trex" or args.lab or args.dut,
         "the sweep drives them on their TRex servers (backend trex), not on a namespace lab (--backend local, "
         "--lab, --dut)"),
        (args.trex_server, "--trex-server: each pair names its server (generators[].trex_server)"),
        (any(p.server is None for p in gens), "generators["
         + ",".join(str(p.index) for p in gens if p.server is None) + "] name no trex_server"),
        (args.flamegraph or args.pgwu_metrics, "--flamegraph and --pgwu-metrics are the embedded lab's"),
        (cfg.provision != "pgwu", f"dut.provision {cfg.provision} over several pairs is not built (pgwu: the "
                                  "bearers of all pairs in one file)"),
        (cfg.counters != "pgwu", f"dut.counters {cfg.counters} over several pairs is not built (the balance over "
                                 "the pairs reads the PGW-U's pgwu metrics)"),
        (spec["latency"], "latency streams over several pairs are not built: add --no-latency"),
        (spec["pcap_limit"], "captures over several pairs are not built: add --pcap-limit 0"),
        (any(c.ip != "4" or c.n3 != "4" for c in cases),
         "--ip 6/4v6 and --n3 6 over several pairs are not built (the pairs' bearers are split by IPv4 address)"),
    ]
    for bad, why in refused:
        if bad:
            raise UserError(head + why)
    return True


def planned_cases(spec: dict, cfg) -> tuple[list, list[dict]]:
    """(cases, skipped) of a checked spec on a lab config; UserError when no case is left."""
    cases, skipped = plan(spec)
    cases, skipped = without_unsendable(cases, skipped, cfg)
    cases, skipped = within_capacity(cases, skipped, cfg)
    if not cases:
        raise UserError("the sweep has no cases (every size was skipped)")
    return cases, skipped


def _check_flamegraph(kind: str) -> None:
    """--flamegraph: perf must be there, and the DUT on this host, before anything is built (a clear
    error, not a silent skip)."""
    if kind != "local":
        raise UserError("--flamegraph records perf on this host, where only the local backend's DUT runs; "
                        "profile a real DUT on the DUT host")
    flamegraph.check_available()


def _check_endpoints(args: argparse.Namespace) -> None:
    """--trex-server HOST[:PORT] and --pgwu-metrics IPV4:PORT, checked before anything is built (a bad
    --pgwu-metrics failed only once the lab was up; a bad --trex-server not at all on a local backend)."""
    def port_ok(p: str) -> bool:
        return p.isdigit() and 0 < int(p) < 65536
    if args.trex_server is not None:
        host, sep, port = args.trex_server.rpartition(":") if ":" in args.trex_server else (args.trex_server, "", "")
        if not host or (sep and not port_ok(port)):
            raise UserError(f"--trex-server {args.trex_server!r}: want HOST[:PORT]")
    if args.pgwu_metrics is not None:
        host, _, port = args.pgwu_metrics.rpartition(":")
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            host = ""
        if not host or not port_ok(port):
            raise UserError(f"--pgwu-metrics {args.pgwu_metrics!r}: want IPV4:PORT, e.g. 127.0.0.1:9464")


def _gateway(url: str | None) -> str | None:
    """The Pushgateway (--pushgateway, else $GTPLAB_PUSHGATEWAY), checked before anything is built: a
    bad URL must not leak a lab later."""
    gw = url or os.environ.get("GTPLAB_PUSHGATEWAY")
    if gw:
        check_gateway_url(gw)
    return gw


def _open(setup, rdir: Path, claim: results.Claim):
    """The backend connected (a lab built, if it needs one); on failure the claim is released and the
    still empty results directory removed: nothing was written, nothing is left behind."""
    try:
        return setup.open()
    except BaseException:
        claim.release()
        with contextlib.suppress(OSError):
            rdir.rmdir()
        raise


def run_record(run_uuid: str, cfg, spec: dict, skipped: list[dict], be, planned: int) -> dict[str, Any]:
    """run.json as the sweep starts (docs/results.md): where it runs, on which lab and CPUs, what it plans."""
    layout = be.lab.state.get("cpu_layout") if be.lab is not None else None
    shared = cfg.cpu_shared_with_generator if layout is None else not layout.get("honoured")
    return {"uuid": run_uuid, "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "backend": be.kind, "lab": cfg.name, "host": socket.gethostname(),
            "lab_config": cfg.path, "spec": spec, "skipped": skipped,
            "cpu_shared_with_generator": shared, "cpu_layout": layout,
            "dut_mode": be.lab.dut_mode if be.lab is not None else cfg.dut.get("mode", "pgwu"),
            # what the report calls the DUT: the lab config's dut.name, else by its mode (analysis.dut_label)
            "dut_name": (cfg.dut_name if (be.lab is None or be.lab.dut_mode == cfg.dut_mode) else None),
            "dut_provision": cfg.provision, "dut_counters": cfg.counters,
            "kernel": platform.release(), "cases_planned": planned,
            "lab_name": be.lab.name if be.lab is not None else None,
            "generator": (be.lab.generator if be.lab is not None else "trex (remote)"),
            # several generator port pairs driven together (gtplab.measure.pairs): which
            **({"generator_pairs": [{"pair": p.index, "server": p.server, "netns": p.netns, "access": p.access,
                                     "sgi": p.sgi, "sgw_base": p.sgw_base, "pdn_base": p.pdn_base}
                                    for p in be.pairs]} if getattr(be, "pairs", None) else {}),
            "notes": ([f"generator and DUT share CPUs ({'; '.join((layout or {}).get('notes', [])) or 'lab config'}): "
                       "rates and CPU costs are the chain's, not the DUT's alone"] if shared else [])
            + (["dut.counters none: packet conservation is checked on the generator's side only "
                "(tx vs rx); where the loss happened is unknown"] if cfg.counters == "none" else [])}


class _Sweep:
    """One sweep while it runs: its results directory and run record, what it started beside the
    cases (pgwu metrics, the pusher, the profiler), the cases done, and how it ended."""

    def __init__(self, be, rdir: Path, run: dict, t_start: float):
        self.be, self.rdir, self.run, self.t_start = be, rdir, run, t_start
        self.pcap_dir = rdir / "pcaps"
        self.pusher = self.exporter = self.profiler = None
        self.done = self.failed = 0
        self.measured = 0                        # cases in which some trial got a packet back
        self.current: dict[str, Any] = {}       # the case running now, for an interruption's record
        self.stop: dict[str, Any] = {}
        self.dut = None                          # the runner's DUT probe, once it is open

    def start(self, pgwu_metrics: str | None, gw: str | None, profile: bool) -> None:
        """`pgwu metrics` if asked, run.json and the room for its last version, the pcaps folder,
        the pusher, the profiler."""
        if pgwu_metrics:
            self.exporter = _start_exporter(self.be, pgwu_metrics)
        try:
            self.rdir.mkdir(parents=True, exist_ok=True)
            self.run["cases_done"] = 0
            results.write_run(self.rdir, self.run)
            # room kept for the last run.json, should the disk fill up during the run
            (self.rdir / RESERVE).write_bytes(bytes(RESERVE_BYTES))
            self.pcap_dir.mkdir(exist_ok=True)
        except OSError as e:
            raise ResultsWriteError(f"Couldn't write results to {self.rdir}: {e.strerror or e}") from None
        self.pusher = Pusher(gw, self.run, results_dir=str(self.rdir)) if gw else None
        if profile:
            # the DUT's CPUs where the lab has a layout (its NAPI threads run there), else all
            layout = self.run["cpu_layout"]
            lay_cpus = (layout or {}).get("dut") if layout and layout.get("honoured") else None
            self.profiler = flamegraph.Profiler(self.rdir / results.FLAMEGRAPH_DIR, lay_cpus)

    def after_association(self, runner, cases: list, cfg) -> list:
        """The cases left once the DUT is open: with dut.pfcp.choose auto, the UPF's FTUP decided at
        association whether it chooses the TEIDs; if it does, random-order uplink cases are skipped
        (without_unsendable), and run.json says so."""
        self.dut = runner.dut
        if self.be.lab is not None:
            # the DUT CPUs kept awake (or not) by the runner, now: run.json says what was applied
            self.run["cpu_layout"] = self.be.lab.state.get("cpu_layout")
            self.run["notes"] += layout_notes(self.run["cpu_layout"])
            results.write_run(self.rdir, self.run)
        if getattr(getattr(self.dut, "cfg", None), "choose", None):     # dut.pfcp.choose auto, resolved
            cases, self.run["skipped"] = without_unsendable(cases, self.run["skipped"], cfg, choose=True)
            self.run["cases_planned"] = len(cases)
            if not cases:
                raise UserError("the sweep has no cases left: the UPF chooses the TEIDs (FTUP), and "
                                "random-order uplink cases cannot send them")
        return cases

    def run_cases(self, runner, cases: list, spec: dict, cfg) -> None:
        """Every case in turn, each written to the results (and pushed) before the next starts."""
        progress = Progress(len(cases))
        for i, p in enumerate(cases, 1):
            self.current.update(case=p.case_id, index=i, pcap=str(
                self.pcap_dir / f"case-{p.case_id}-port{runner.ports(p.direction)[1]}.pcap"))
            order = " in random order" if p.order == "random" else ""
            progress.start_case(i, f"{p.direction} {p.frame_size} B {p.flow_mode} {p.flows} flows{order} "
                                   f"csum {p.checksum} IPv{p.ip}" + (f" N3 IPv{p.n3}" if p.n3 != "4" else "")
                                   + f" {p.rate_mode}")
            if self.pusher:
                self.pusher.case_started({"case_id": p.case_id, "direction": p.direction,
                                          "frame_size": p.actual_size, "flows": p.flows,
                                          "checksum": p.checksum, "ip": p.ip, "n3": p.n3}, index=i - 1, total=len(cases))
            with (self.profiler.case(p.case_id) if self.profiler else contextlib.nullcontext()):
                try:
                    record = measure_case(runner, p, spec, cfg, self.pcap_dir, progress)
                except OSError as e:
                    if e.errno not in _WRITE_ERRNOS:
                        raise
                    # its capture could not be written into the results directory
                    raise ResultsWriteError(f"Couldn't write results of case {p.case_id} to {self.rdir}: "
                                            f"{e.strerror or e}; {self.done} case(s) before it are there") from None
            record.run_uuid = self.run["uuid"]         # every line says which run wrote it
            if self.profiler:
                record.flamegraph = str(results.flamegraph_path(self.rdir, p.case_id).relative_to(self.rdir))
            rec = record.to_dict()
            try:
                results.append_case(self.rdir, rec)
            except OSError as e:
                raise ResultsWriteError(f"Couldn't write case {p.case_id} to {self.rdir}: {e.strerror or e}; "
                                        f"{self.done} case(s) before it are there") from None
            self.current.clear()
            self.done += 1
            self.run["cases_done"] = self.done      # run.json counts what finished, should the run be killed
            try:
                results.write_run(self.rdir, self.run)
            except OSError as e:
                raise ResultsWriteError(f"Couldn't write {self.rdir / results.RUN_FILE}: {e.strerror or e}; "
                                        f"{self.done} case(s) are in its cases file") from None
            self.failed += not rec["conservation_ok"]
            # a trial measured something when packets came back, or when every one it sent is on a
            # counter (a DUT that drops them all, by reason, is measured: its loss is located)
            self.measured += any((t.get("rx_packets") or 0) > 0
                                 or ((t.get("tx_packets") or 0) > 0 and (t.get("conservation") or {}).get("ok"))
                                 for t in rec["trials"])
            if self.pusher:
                self.pusher.push(rec)
            progress.done(f"[{i}/{len(cases)}] {rec['case_id']}: {case_summary(rec)}"
                          + ("" if rec["conservation_ok"] else "  CONSERVATION FAILED"))

    def note_dut(self, runner) -> None:
        """What the DUT said over the whole run, once the runner is closed: PFCP usage reports against
        the generator's octets (dut.pfcp.urr), UPF restarts, the bearers the UPF returned."""
        usage = runner.usage_comparisons()
        if usage:
            self.run["pfcp_usage"] = usage
        if getattr(runner.dut, "restarts", 0):
            self.run["notes"].append(f"the UPF restarted {runner.dut.restarts} time(s) during the run (new PFCP "
                                     "Recovery Time Stamp); its sessions were established again")
        provisioned = getattr(runner.dut, "provisioned_text", None)
        if provisioned:                             # what the UPF returned (TEIDs in force)
            (self.rdir / "bearers-pfcp.txt").write_text(provisioned)
            self.run["pfcp_bearer_file"] = "bearers-pfcp.txt"

    @contextlib.contextmanager
    def ending(self):
        """Records how the block ended (finished, interrupted by SIGINT/SIGTERM, stopped by an error)
        and then runs the end steps, whatever happened: SIGTERM is an exception meanwhile."""
        main = threading.current_thread() is threading.main_thread()
        old_term = signal.signal(signal.SIGTERM, _sigterm) if main else None
        try:
            yield
        except KeyboardInterrupt:
            self.stop.update(interrupted=True, signal="SIGINT")
            raise
        except Terminated:
            self.stop.update(interrupted=True, signal="SIGTERM")
            raise
        except ResultsWriteError as e:
            self.stop.update(stopped=str(e))
            raise
        except BaseException as e:
            self.stop.update(stopped=f"{type(e).__name__}: {e}")
            raise
        finally:
            if old_term is not None:
                signal.signal(signal.SIGTERM, old_term)
            _pfcp_notes(self.run, self.dut)
            # every step on its own: whatever fails, the lab is torn down and run.json says how it ended
            _finally_steps(self.be, self.pusher, self.exporter, self.rdir, self.run, self.stop, self.current,
                           self.done, self.failed, self.t_start)


def do_sweep(args: argparse.Namespace) -> int:
    cfg = labconfig.load(args.lab_config)
    if getattr(args, "share_cpus", False):
        cfg.lab["share_cpus"] = True
    _check_endpoints(args)
    spec = apply_overrides(load_spec(args.spec), args)
    cases, skipped = planned_cases(spec, cfg)
    several = check_pairs(args, cfg, spec, cases)
    run_uuid = str(uuidlib.uuid4())
    if args.flamegraph:
        _check_flamegraph(args.backend or cfg.backend)
    gw = _gateway(args.pushgateway)
    t_start = time.monotonic()
    setup = (PairsBackend(cfg.generators) if several else
             backend.choose(cfg, args.backend, lab=args.lab, dut=args.dut, server=args.trex_server))
    rdir, claim = _results_dir(args.out, run_uuid)
    with claim:
        print(f"gtplab sweep: {len(cases)} case(s) on lab config {cfg.name} ({setup.kind}); results in {rdir}",
              file=sys.stderr)
        be = _open(setup, rdir, claim)
        sw = _Sweep(be, rdir, run_record(run_uuid, cfg, spec, skipped, be, len(cases)), t_start)
        with sw.ending():
            sw.start(args.pgwu_metrics, gw, args.flamegraph)
            with (PairsSweepRunner(cfg) if several else Runner(be, cfg)) as runner, \
                    (sw.profiler or contextlib.nullcontext()):
                if args.on_trial_start:
                    runner.on_start = trial_hook(args.on_trial_start)
                cases = sw.after_association(runner, cases, cfg)
                sw.run_cases(runner, cases, spec, cfg)
            sw.note_dut(runner)
        print(f"gtplab sweep: {sw.done} case(s) in {time.monotonic() - t_start:.0f} s"
              + (f", {sw.failed} with unexplained packet counts" if sw.failed else ""), file=sys.stderr)
        print(f"results: {rdir.resolve()}")
        rep = _report(rdir)
        if rep:
            print(f"report: {rep}")
        nothing = no_measurement(sw.done, sw.measured, len(sw.run.get("skipped") or []))
        if nothing:
            print(f"gtplab sweep: {nothing}", file=sys.stderr)
    return 1 if sw.failed or nothing else 0


def no_measurement(done: int, measured: int, skipped: int) -> str | None:
    """Why a sweep measured nothing (no case ran, or no trial of any case got a packet back or
    located the loss of what it sent), or None when some case measured something."""
    if measured:
        return None
    if not done:
        return f"no case ran ({skipped} skipped: run.json's skipped says why): nothing was measured"
    return (f"nothing was measured: no packet came back in any trial of the {done} case(s) and no trial's loss "
            "was located (see each case's conservation and rx_path)")


def _pfcp_notes(run: dict, dut) -> None:
    """What the UPF did that did not fail the run (a release it left unanswered: a warning) and the
    reports it sent, into run.json (docs/pfcp.md); the warnings also on stderr."""
    for w in getattr(dut, "warnings", None) or []:
        print(f"gtplab sweep: warning: PFCP: {w}", file=sys.stderr)
        run["notes"].append(f"PFCP warning: {w}")
    reports = getattr(dut, "reports", None)
    if isinstance(reports, dict):
        run["pfcp_reports"] = reports


class _DeprecatedAlias(argparse.Action):
    """A flag kept for one release under its old name: sets the new flag's dest and says so on stderr."""

    def __init__(self, option_strings, dest, new: str, **kw):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)
        self.new = new

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: {option_string} is deprecated, use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, True)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("sweep", help="run the frame-size sweep through the PGW-U (results dir)",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--spec", metavar="FILE", help=f"sweep spec YAML (default: {DEFAULT_SPEC})")
    p.add_argument("--lab-config", metavar="NAME|FILE",
                   help="lab config: a name in gtplab/lab/labs/ or a file (default: $GTPLAB_LAB_CONFIG or embedded)")
    p.add_argument("--backend", choices=("local", "trex"), help="default: the lab config's")
    p.add_argument("--trex-server", metavar="HOST[:PORT]", help="default: the lab config's or $TREX_SERVER")
    p.add_argument("--lab", metavar="NAME", help="local backend: use this running lab (gtplab lab up) "
                                                 "instead of building one")
    p.add_argument("--dut", choices=("pgwu", "socket", "fwd"),
                   help="embedded lab: the XDP PGW-U (default: the lab config's dut.mode), the socket-path "
                        "PGW-U (socket, with the lab config's dut.socket knobs: docs/socket.md) or the "
                        "reference forwarder (fwd), to see what this machine forwards at all")
    p.add_argument("--out", metavar="DIR", help="results directory (default: ./results/<uuid>)")
    p.add_argument("--share-cpus", action="store_true",
                   help="embedded lab: run on CPUs another lab holds, and say so in every result (default: "
                        "refused, naming that lab; also lab config lab.share_cpus, $GTPLAB_SHARE_CPUS=1)")
    p.add_argument("--flamegraph", action="store_true",
                   help="record `perf record -g` on the DUT's CPUs during each case: flamegraphs/case-<id>.svg, "
                        "linked from the report (local backend)")
    p.add_argument("--profile", action=_DeprecatedAlias, dest="flamegraph", new="--flamegraph",
                   help="deprecated alias of --flamegraph (removed in the next release)")
    p.add_argument("--pgwu-metrics", metavar="ADDR:PORT",
                   help="serve the embedded DUT's `pgwu metrics` there while the sweep runs (e.g. the pgwu "
                        "target of `gtplab monitor up`, 127.0.0.1:9464)")
    p.add_argument("--pushgateway", metavar="URL", help="push each case there (default: $GTPLAB_PUSHGATEWAY; none)")
    g = p.add_argument_group("spec overrides")
    g.add_argument("--sizes", metavar="N,N..", help="frame sizes on the wire incl. FCS")
    g.add_argument("--directions", metavar="D,D", help="uplink,downlink")
    g.add_argument("--flow-modes", metavar="M,M", help="single,multi")
    g.add_argument("--flows", type=int, help="flows (bearers the traffic cycles through) in multi mode")
    g.add_argument("--bearers", type=int, help="bearers installed on the DUT (>= flows)")
    g.add_argument("--checksum", metavar="on,off", help="outer UDP checksum modes")
    g.add_argument("--ip", metavar="4,6,4v6",
                   help="address families of the user packets: 4 (default), 6 (IPv6 UEs, fd47:7470:i::/64), "
                        "4v6 (an IPv4 and an IPv6 stream per case); one case each (docs/sweep.md)")
    g.add_argument("--n3", metavar="4,6",
                   help="families of the tunnel's outer header: 4 (default, GTP-U over IPv4), 6 (GTP-U over "
                        "IPv6 on the lab's N3 fd47:7473::/64; the DUT must take it: docs/ipv6.md); one case each")
    g.add_argument("--rate-mode", choices=RATE_MODES,
                   help="fixed: one trial at --rate; search: MLRsearch (RFC 9971) of the goals")
    g.add_argument("--rate", help="fixed rate: pps or a TRex multiplier (100%%, 500kpps, 5gbps)")
    g.add_argument("--duration", type=float, help="seconds of the trial at a fixed rate (a search's trials: its "
                                                  "goals'; its latency trials: --search latency_duration=S)")
    g.add_argument("--goals", metavar="GOALS",
                   help="search goals: presets ndr,pdr,rfc2544 separated by commas, or a YAML list of presets "
                        "and goal records: '[ndr, {preset: pdr, loss_ratio: 0.001}]' (default: ndr,pdr)")
    g.add_argument("--search", metavar="KEY=V,..",
                   help="search keys: min_load, max_load (pps), time_budget (s per case), max_trials, "
                        "disturbed (exclude|count), latency_at (%% of the PDR), latency_duration (s), e.g. "
                        "time_budget=20,min_load=5e4,latency_at=[0,90]")
    g.add_argument("--max-trials", type=int, help="search: most trials per case (= --search max_trials=N)")
    g.add_argument("--pcap-limit", type=int, help="frames captured per case (0: none)")
    g.add_argument("--no-latency", action="store_true", help="no latency stream")
    g.add_argument("--no-scale", action="store_true",
                   help="leave out the spec's scale cases (many bearers in random order, one per direction)")
    g.add_argument("--on-trial-start", metavar="CMD",
                   help="a shell command run once each trial's traffic has started (background frames on "
                        "the links, a capture elsewhere); the trial's traffic runs until it has ended "
                        f"(at most {TRIAL_HOOK_TIMEOUT_S:.0f} s); a non-zero exit stops the sweep")
    p.set_defaults(func=do_sweep)
