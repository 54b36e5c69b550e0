"""Sweep planning: the sweep spec (gtplab/measure/sweeps/default.yaml, or --spec FILE, then the CLI's
overrides) checked completely and turned into the list of cases, before anything is built.

Used by gtplab.measure.sweep (which then runs the cases) and the tests; docs/sweep.md describes the
spec's keys.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gtplab.errors import UserError
from gtplab.gtpu import bearers as bearer_files
from gtplab.lab.config import read_yaml
from gtplab.measure import mlrsearch as mlr
from gtplab.rates import RateError, parse_mult

SWEEPS_DIR = Path(__file__).resolve().parent / "sweeps"


DEFAULT_SPEC = SWEEPS_DIR / "default.yaml"


DIRECTIONS = ("uplink", "downlink")


FLOW_MODES = ("single", "multi")


RATE_MODES = ("fixed", "search")


UNDERSIZE = ("clamp", "skip", "error")


IP_FAMILIES = ("4", "6", "4v6")   # the user packets' address family (the profiles' --ip, issue 32)
N3_FAMILIES = ("4", "6")          # the tunnel's outer family, GTP-U over IPv4 or IPv6 (--n3, issue 32)


# the search (rate mode search: MLRsearch, RFC 9971; docs/sweep.md, docs/mlrsearch.md)
SEARCH_KEYS = {"goals", "min_load", "max_load", "time_budget", "max_trials", "disturbed", "latency_at",
               "latency_duration"}
SEARCH_DEFAULTS = {"goals": ["ndr", "pdr"], "min_load": 10e3, "max_load": None, "time_budget": None,
                   "max_trials": None, "disturbed": "exclude", "latency_at": [0, 10, 50, 90],
                   "latency_duration": 0.25}


SPEC_KEYS = {"frame_sizes", "directions", "flow_modes", "flows", "bearers", "checksum", "rate_mode",
             "rate", "duration", "search", "latency", "pcap_limit", "undersize", "scale", "ip", "n3"}
# keys and values of the binary search the sweep ran before MLRsearch: refused with what replaced them
_OLD = {"ndr": "the `ndr` section (loss_tolerance, pdr_loss_tolerance, resolution, max_trials) is gone: the "
               "search is MLRsearch (RFC 9971) now, its keys are under `search` (goals, min_load, max_load, "
               "time_budget, max_trials; docs/sweep.md)"}


SGWS = 4                      # SGWs the profiles spread bearers over (their default)


def common():
    """The bearer files' shared definitions (frame size limits, header lengths): gtpu.bearers."""
    return bearer_files.load_common()


@dataclass
class CaseParams:
    """One sweep case (or one test's traffic): what to send and how."""
    direction: str                        # uplink | downlink
    frame_size: int                       # requested frame size (bytes on the wire incl. FCS)
    flow_mode: str = "multi"              # single | multi
    flows: int = 1024
    bearers: int | None = None            # default: flows
    checksum: str = "on"                  # outer UDP checksum: on | off
    rate_mode: str = "fixed"              # fixed | search
    rate: Any = "100%"                    # fixed: pps (number) or a TRex mult string
    duration: float = 1.0                 # fixed: the trial (a search's trials are its goals')
    latency: bool = True
    case_id: str = ""
    order: str = "seq"                    # seq | random: the order the traffic hits the bearers
    ip: str = "4"                         # 4 | 6 | 4v6: the user packets' address family
    n3: str = "4"                         # 4 | 6: GTP-U over IPv4 or IPv6

    @property
    def actual_size(self) -> int:
        return max(self.frame_size, common().min_frame_size(self.direction, ip=self.ip, n3=self.n3))

    @property
    def n_bearers(self) -> int:
        return self.bearers or (1 if self.flow_mode == "single" else self.flows)

    def tunables(self) -> dict[str, Any]:
        """The profile's tunables; the bearer file is written from the same ones."""
        c = common()
        size = self.actual_size
        stats = "none"
        if self.latency and size - c.FCS_LEN - c.header_len(self.direction, ip=self.ip, n3=self.n3) >= c.STATS_PAYLOAD:
            stats = "latency"
        t: dict[str, Any] = {"size": size, "flow_mode": self.flow_mode, "bearers": self.n_bearers,
                             "sgws": SGWS, "stats": stats}
        if self.flow_mode == "multi":
            t["flows"] = self.flows
            if self.order != "seq":
                t["order"] = self.order
        if self.direction == "uplink":
            t["outer_udp_csum"] = "valid" if self.checksum == "on" else "zero"
        if self.ip != "4":
            t["ip"] = self.ip             # only then: an IPv4 case's tunables stay as they were
        if self.n3 != "4":
            t["n3"] = self.n3             # likewise
        return t


def _list(v):
    return v if isinstance(v, list) else [v]


def _ip(v) -> str:
    """An address family of the spec's `ip` (YAML reads 4 and 6 as integers)."""
    if isinstance(v, bool) or str(v) not in IP_FAMILIES:
        raise ValueError(v)
    return str(v)


def ip_suffix(ip: str, n3: str = "4") -> str:
    """What a case id carries for its address families: nothing for IPv4 (the ids stay as they
    were), -ip6 / -ip4v6 for the user packets', -n3v6 for GTP-U over IPv6."""
    return ("" if str(ip) == "4" else f"-ip{ip}") + ("" if str(n3) == "4" else f"-n3v{n3}")


def _n3(v) -> str:
    """A family of the spec's `n3` (YAML reads 4 and 6 as integers)."""
    if isinstance(v, bool) or str(v) not in N3_FAMILIES:
        raise ValueError(v)
    return str(v)


def _csum(v) -> str:
    # YAML 1.1 reads on/off as booleans
    if v is True or v == "on":
        return "on"
    if v is False or v == "off":
        return "off"
    raise ValueError(v)


def validate(spec: dict[str, Any], where: str = "sweep spec") -> dict[str, Any]:
    """The spec with defaults filled in and values normalised; UserError naming the first problem."""
    def bad(msg):
        raise UserError(f"{where}: {msg}")
    if not isinstance(spec, dict):
        bad("must be a mapping")
    for k, why in _OLD.items():
        if k in spec:
            bad(why)
    unknown = set(spec) - SPEC_KEYS
    if unknown:
        bad(f"unknown key(s) {', '.join(sorted(unknown))} (allowed: {', '.join(sorted(SPEC_KEYS))})")
    c = common()
    s = copy.deepcopy(spec)
    sizes = _list(s.get("frame_sizes", [128]))
    if not sizes or not all(isinstance(x, int) and not isinstance(x, bool) for x in sizes):
        bad(f"frame_sizes must be a list of integers: {sizes!r}")
    for x in sizes:
        if not c.MIN_FRAME <= x <= c.MAX_FRAME:
            bad(f"frame size {x} out of range {c.MIN_FRAME}..{c.MAX_FRAME} (bytes on the wire incl. FCS)")
    if len(set(sizes)) != len(sizes):
        bad(f"frame_sizes has duplicates: {sizes}")
    s["frame_sizes"] = sizes
    dirs = _list(s.get("directions", list(DIRECTIONS)))
    if not dirs or any(d not in DIRECTIONS for d in dirs) or len(set(dirs)) != len(dirs):
        bad(f"directions {dirs!r}: a list of {', '.join(DIRECTIONS)}")
    s["directions"] = dirs
    fms = _list(s.get("flow_modes", ["multi"]))
    if not fms or any(f not in FLOW_MODES for f in fms):
        bad(f"flow_modes {fms!r}: a list of {', '.join(FLOW_MODES)}")
    s["flow_modes"] = fms
    flows = s.get("flows", 1024)
    if not isinstance(flows, int) or isinstance(flows, bool) or not 1 <= flows <= 1 << 20:
        bad(f"flows {flows!r}: an integer 1..{1 << 20}")
    if "multi" in fms and flows > SGWS and flows % SGWS:
        bad(f"flows {flows} must be a multiple of {SGWS} (the SGWs the profiles use; bearer i uses SGW i % {SGWS})")
    s["flows"] = flows
    b = s.get("bearers")
    if b is not None and (not isinstance(b, int) or isinstance(b, bool) or not flows <= b <= 1 << 20):
        bad(f"bearers {b!r}: null or an integer flows ({flows}) .. {1 << 20}")
    s["bearers"] = b
    try:
        s["checksum"] = [_csum(v) for v in _list(s.get("checksum", ["on"]))]
    except ValueError as e:
        bad(f"checksum {e.args[0]!r}: on or off")
    if not s["checksum"]:
        bad("checksum: an empty list (give on, off or both)")
    try:
        s["ip"] = [_ip(v) for v in _list(s.get("ip", ["4"]))]
    except ValueError as e:
        bad(f"ip {e.args[0]!r}: a list of {', '.join(IP_FAMILIES)} (the user packets' address family)")
    if not s["ip"] or len(set(s["ip"])) != len(s["ip"]):
        bad(f"ip {s['ip']!r}: a non-empty list of distinct {', '.join(IP_FAMILIES)}")
    try:
        s["n3"] = [_n3(v) for v in _list(s.get("n3", ["4"]))]
    except ValueError as e:
        bad(f"n3 {e.args[0]!r}: a list of {', '.join(N3_FAMILIES)} (GTP-U over IPv4 or IPv6)")
    if not s["n3"] or len(set(s["n3"])) != len(s["n3"]):
        bad(f"n3 {s['n3']!r}: a non-empty list of distinct {', '.join(N3_FAMILIES)}")
    if "6" in s["n3"] and "off" in s["checksum"] and "uplink" in dirs:
        bad("checksum off with n3 6: a UDP checksum is mandatory over IPv6 (RFC 8200 8.1; the RFC "
            "6935/6936 zero-checksum opt-out is not GTP-U's, docs/ipv6.md): checksum on")
    rm = s.get("rate_mode", "fixed")
    if rm in ("ndr", "pdr"):
        bad(f"rate_mode {rm}: NDR and PDR are goals of one search now (MLRsearch, RFC 9971): rate_mode search, "
            "with search.goals (default NDR and PDR0.5; --goals ndr,pdr)")
    if rm not in RATE_MODES:
        bad(f"rate_mode {rm!r}: one of {', '.join(RATE_MODES)}")
    s["rate_mode"] = rm
    rate = s.get("rate", "100%")
    if isinstance(rate, bool):
        bad(f"rate {rate!r}")
    if isinstance(rate, (int, float)):
        if not math.isfinite(rate) or rate <= 0:
            bad(f"rate {rate}: must be positive and finite (packets per second)")
    else:
        try:
            parse_mult(rate)
        except RateError as e:
            bad(f"rate {rate!r}: {e}")
    s["rate"] = rate
    d = s.get("duration", 1.0)
    if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0.05 <= d <= 3600:
        bad(f"duration {d!r}: seconds, 0.05..3600")
    s["duration"] = float(d)
    s["search"] = _search(s.get("search"), bad)
    lat = s.get("latency", True)
    if not isinstance(lat, bool):
        bad(f"latency {lat!r}: true or false")
    s["latency"] = lat
    pl = s.get("pcap_limit", 64)
    if isinstance(pl, bool) or not isinstance(pl, int) or not 0 <= pl <= 100000:
        bad(f"pcap_limit {pl!r}: 0 (no capture) .. 100000 frames")
    s["pcap_limit"] = pl
    us = s.get("undersize", "clamp")
    if us not in UNDERSIZE:
        bad(f"undersize {us!r}: one of {', '.join(UNDERSIZE)}")
    s["undersize"] = us
    if us == "error":
        for dr in dirs:
            for ip in s["ip"]:
                for n3 in s["n3"]:
                    lo = c.min_frame_size(dr, ip=ip, n3=n3)
                    small = [x for x in sizes if x < lo]
                    if small:
                        bad(f"frame size(s) {small} below the {dr} minimum {lo}"
                            + (f" with IPv{ip} user packets" if ip != "4" else "")
                            + (" over IPv6 (GTP-U)" if n3 != "4" and dr == "uplink" else "")
                            + " (undersize: error; use clamp or skip)")
    s["scale"] = _scale(s.get("scale"), bad)
    return s


def _number(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


def _search(sr, bad) -> dict[str, Any]:
    """The spec's `search`, defaults filled in: goals as full records (every RFC 9971 attribute and
    the code; a preset name or a record with an optional preset in the spec), loads in pps, the time
    budget in seconds (null: mlrsearch.default_time_budget of the goals), max_trials, the disturbed
    trials' policy, the latency loads in % of the PDR and the seconds of each latency trial."""
    if sr is None:
        sr = {}
    if not isinstance(sr, dict):
        bad(f"search: a mapping with {', '.join(sorted(SEARCH_KEYS))}, got {sr!r}")
    unknown = set(sr) - SEARCH_KEYS
    if unknown:
        bad(f"search: unknown key(s) {', '.join(sorted(unknown))} (allowed: {', '.join(sorted(SEARCH_KEYS))})")
    s = {**SEARCH_DEFAULTS, **sr}
    goals = _list(s["goals"])
    if not goals:
        bad("search.goals: an empty list (give presets ndr, pdr, rfc2544 or goal records)")
    built = []
    for i, g in enumerate(goals):
        try:
            g = copy.deepcopy(g)
            code = g.pop("code", None) if isinstance(g, dict) else None
            goal = mlr.goal_from_spec(g)
        except mlr.GoalError as e:
            bad(f"search.goals[{i}]: {e}")
        if code is not None and code != goal.code:
            bad(f"search.goals[{i}]: code {code!r} does not match the goal's attributes ({goal})")
        built.append(goal)
    try:
        mlr.check_goals(built)
    except mlr.GoalError as e:
        bad(f"search.goals: {e}")
    s["goals"] = [g.as_dict() for g in built]
    if not _number(s["min_load"]) or s["min_load"] <= 0:
        bad(f"search.min_load {s['min_load']!r}: a positive load in packets per second")
    s["min_load"] = float(s["min_load"])
    if s["max_load"] is not None:
        if not _number(s["max_load"]) or s["max_load"] < s["min_load"]:
            bad(f"search.max_load {s['max_load']!r}: null (the lab config's max_rate_pps, else the generator "
                f"flat out) or packets per second >= min_load ({s['min_load']:g})")
        s["max_load"] = float(s["max_load"])
    longest = max(g.final_trial_duration for g in built)
    if s["time_budget"] is not None:
        tb = s["time_budget"]
        if not _number(tb) or tb <= 0:
            bad(f"search.time_budget {tb!r}: seconds per case (null: {mlr.DEFAULT_TIME_BUDGET:g} s for the "
                "default goals, more for longer trials)")
        if tb < longest + mlr.DEFAULT_TRIAL_OVERHEAD:
            bad(f"search.time_budget {tb:g} s is less than one {longest:g} s trial (+ {mlr.DEFAULT_TRIAL_OVERHEAD:g} s): "
                "the search could not run a trial its goals count")
        s["time_budget"] = float(tb)
    mt = s["max_trials"]
    if mt is not None and (isinstance(mt, bool) or not isinstance(mt, int) or not 1 <= mt <= 10000):
        bad(f"search.max_trials {mt!r}: null (the time budget alone) or 1..10000")
    if s["disturbed"] not in mlr.DISTURBED_POLICIES:
        bad(f"search.disturbed {s['disturbed']!r}: one of {', '.join(mlr.DISTURBED_POLICIES)} (exclude: a trial "
            "the host disturbed is measured again; count: classified like any other)")
    la = _list(s["latency_at"]) if s["latency_at"] is not None else []
    if not all(_number(x) and 0 <= x < 100 for x in la) or len(set(la)) != len(la):
        bad(f"search.latency_at {s['latency_at']!r}: a list of distinct % of the PDR, 0 (idle) .. 99")
    s["latency_at"] = sorted(la)
    ld = s["latency_duration"]
    if not _number(ld) or not 0.05 <= ld <= 60:
        bad(f"search.latency_duration {ld!r}: seconds per latency trial, 0.05..60")
    s["latency_duration"] = float(ld)
    return s


def goals(search: dict[str, Any]) -> tuple[mlr.SearchGoal, ...]:
    """The SearchGoals of a validated spec's `search`."""
    return tuple(mlr.goal_from_spec({k: v for k, v in g.items() if k != "code"}) for g in search["goals"])


def _scale(sc, bad):
    """The spec's `scale`: null, or {flows, order, frame_sizes}: one more multi-flow case per
    direction and size, many bearers in the given order (issue 13: 1 M bearers in random order
    against the grid's `flows` at the same size)."""
    if sc is None:
        return None
    c = common()
    keys = {"flows", "order", "frame_sizes"}
    if not isinstance(sc, dict) or set(sc) - keys:
        bad(f"scale: null or a mapping with {', '.join(sorted(keys))}"
            + (f" (unknown: {', '.join(sorted(set(sc) - keys))})" if isinstance(sc, dict) else ""))
    flows = sc.get("flows", 1_000_000)
    if not isinstance(flows, int) or isinstance(flows, bool) or not SGWS <= flows <= 1 << 20 \
            or flows % SGWS:
        bad(f"scale.flows {flows!r}: a multiple of {SGWS}, {SGWS}..{1 << 20}")
    order = sc.get("order", "random")
    if order not in ("seq", "random"):
        bad(f"scale.order {order!r}: seq or random")
    sizes = _list(sc.get("frame_sizes", [64]))
    if not sizes or not all(isinstance(x, int) and not isinstance(x, bool)
                            and c.MIN_FRAME <= x <= c.MAX_FRAME for x in sizes):
        bad(f"scale.frame_sizes {sizes!r}: a non-empty list of frame sizes {c.MIN_FRAME}..{c.MAX_FRAME}")
    return {"flows": flows, "order": order, "frame_sizes": sizes}


def load_spec(path: str | None) -> dict[str, Any]:
    """The sweep spec, read as strictly as a lab config (gtplab.lab.config.read_yaml: text, size,
    duplicate keys, aliases, finite numbers; one UserError line), then validated."""
    p = Path(path) if path else DEFAULT_SPEC
    if not p.exists():
        raise UserError(f"sweep spec {p}: no such file")
    data = read_yaml(p, "sweep spec")
    return validate(data if data is not None else {}, f"sweep spec {p}")


def _csv(text: str, conv=str, flag: str = "") -> list:
    """A comma-separated option's values; UserError naming the option (flag) when one does not convert."""
    try:
        return [conv(x.strip()) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"{flag} {text!r}: bad list" if flag else f"bad list {text!r}") from None


def _empty(flag: str, key: str):
    raise UserError(f"{flag} '': no values ({key} must not be empty)")


def apply_overrides(spec: dict, args: argparse.Namespace) -> dict:
    """CLI options over the spec file; validated again as a whole."""
    s = dict(spec)
    # "" is a value (an empty list, refused), not "use the spec's"
    if args.sizes is not None:
        s["frame_sizes"] = _csv(args.sizes, int, "--sizes") or _empty("--sizes", "frame_sizes")
    if args.directions is not None:
        s["directions"] = _csv(args.directions, str, "--directions") or _empty("--directions", "directions")
    if args.flow_modes is not None:
        s["flow_modes"] = _csv(args.flow_modes, str, "--flow-modes") or _empty("--flow-modes", "flow_modes")
    if args.flows is not None:
        s["flows"] = args.flows
    if args.bearers is not None:
        s["bearers"] = args.bearers
    if args.checksum is not None:
        s["checksum"] = _csv(args.checksum, str, "--checksum") or _empty("--checksum", "checksum")
    if getattr(args, "ip", None) is not None:
        s["ip"] = _csv(args.ip, str, "--ip") or _empty("--ip", "ip")
    if getattr(args, "n3", None) is not None:
        s["n3"] = _csv(args.n3, str, "--n3") or _empty("--n3", "n3")
    if args.rate_mode:
        s["rate_mode"] = args.rate_mode
    if args.rate is not None:
        try:
            s["rate"] = float(args.rate)
        except ValueError:
            s["rate"] = args.rate
    if args.duration is not None:
        s["duration"] = args.duration
    goals_arg, search_arg = getattr(args, "goals", None), getattr(args, "search", None)
    sr = dict(s.get("search") or {})
    if goals_arg is not None:
        sr["goals"] = parse_goals(goals_arg)
    if search_arg is not None:
        sr.update(parse_search(search_arg))
    if args.max_trials is not None:
        sr["max_trials"] = args.max_trials
    s["search"] = sr
    given = [o for o, v in (("--goals", goals_arg), ("--search", search_arg), ("--max-trials", args.max_trials))
             if v is not None]
    if s.get("rate_mode") == "fixed" and given:
        raise UserError(f"{given[0]}: the rate mode is fixed (one trial per case); the search runs with rate_mode "
                        "search (--rate-mode search)")
    if s.get("rate_mode") == "search" and args.duration is not None:
        raise UserError("--duration: seconds of a fixed-rate trial; a search's trials last what its goals say "
                        "(--goals), its latency trials search.latency_duration (--search latency_duration=S)")
    if args.pcap_limit is not None:
        s["pcap_limit"] = args.pcap_limit
    if args.no_latency:
        s["latency"] = False
    if getattr(args, "no_scale", False):
        s["scale"] = None
    return validate(s, "sweep spec (with command-line options)")


def parse_goals(text: str) -> list:
    """--goals: preset names separated by commas (ndr,pdr / rfc2544), or a YAML list whose entries are
    presets or goal records ('[ndr, {preset: pdr, loss_ratio: 0.001}]'); checked by validate."""
    t = text.strip()
    if t.startswith("["):
        try:
            v = yaml.safe_load(t)
        except yaml.YAMLError as e:
            raise UserError(f"--goals {text!r}: not a YAML list: {str(e).splitlines()[0]}") from None
        if not isinstance(v, list):
            raise UserError(f"--goals {text!r}: not a YAML list")
        return v
    return _csv(t)


def parse_search(text: str) -> dict[str, Any]:
    """--search KEY=VALUE[,KEY=VALUE...]: search keys other than goals, each value read as YAML
    (min_load=20000,time_budget=20,max_load=null); checked by validate."""
    out: dict[str, Any] = {}
    parts, depth, cur = [], 0, ""
    for ch in text:                 # commas inside [...] or {...} belong to the value
        depth += (ch in "[{") - (ch in "]}")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    for part in (x.strip() for x in parts):
        if not part:
            continue
        key, sep, val = part.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(f"--search {text!r}: KEY=VALUE pairs separated by commas, got {part!r}")
        if key == "goals":
            raise UserError("--search goals=...: give the goals with --goals")
        if key not in SEARCH_KEYS:
            raise UserError(f"--search: unknown key {key!r} (allowed: {', '.join(sorted(SEARCH_KEYS - {'goals'}))})")
        try:
            out[key] = yaml.safe_load(val) if val.strip() else None
        except yaml.YAMLError:
            raise UserError(f"--search {key}={val!r}: not a value") from None
        if isinstance(out[key], str):           # YAML 1.1 reads 5e4 (no dot) as text
            with contextlib.suppress(ValueError):
                if math.isfinite(float(out[key])):
                    out[key] = float(out[key])
        if key == "latency_at" and isinstance(out[key], (int, float)):
            out[key] = [out[key]]
    return out


def plan(spec: dict) -> tuple[list, list[dict]]:
    """(cases, skipped): CaseParams for every combination, in run order (direction, then size)."""
    c = common()
    cases, skipped = [], []
    ips = spec.get("ip") or ["4"]
    n3s = spec.get("n3") or ["4"]
    for d in spec["directions"]:
        for fm in spec["flow_modes"]:
            flows = 1 if fm == "single" else spec["flows"]
            for cs in spec["checksum"]:
                for ip in ips:
                    for n3 in n3s:
                        lo = c.min_frame_size(d, ip=ip, n3=n3)
                        for size in spec["frame_sizes"]:
                            if size < lo and spec["undersize"] == "skip":
                                skipped.append({"direction": d, "frame_size": size,
                                                **({"ip": ip} if ip != "4" else {}),
                                                **({"n3": n3} if n3 != "4" else {}),
                                                "note": f"below the {d} minimum {lo}"
                                                        + (f" with IPv{ip} user packets" if ip != "4" else "")
                                                        + (" over IPv6 (GTP-U)" if n3 != "4" and d == "uplink"
                                                           else "")
                                                        + ": skipped"})
                                continue
                            cid = f"{d}-{size}-{fm}{flows}-csum{cs}{ip_suffix(ip, n3)}-{spec['rate_mode']}"
                            cases.append(CaseParams(direction=d, frame_size=size, flow_mode=fm, flows=flows,
                                                    bearers=spec["bearers"] if fm == "multi" else None,
                                                    checksum=cs, rate_mode=spec["rate_mode"], rate=spec["rate"],
                                                    duration=spec["duration"], latency=spec["latency"],
                                                    case_id=cid, ip=ip, n3=n3))
    # the scale cases last, after every grid case: both directions use the same million bearers
    # (IPv4 user packets over IPv4 whatever `ip` and `n3` say: an IPv6 stream in random order cannot keep the outer UDP
    # checksum valid, docs/profiles.md)
    # (loaded once), and no grid case runs while the kernel frees them after a flush (RCU callbacks
    # on the DUT's CPU: a grid case right after one measured 3 times the DUT CPU per packet)
    sc = spec.get("scale")
    for d in (spec["directions"] if sc else []):
        lo = c.min_frame_size(d)
        for size in sc["frame_sizes"]:
            if size < lo and spec["undersize"] == "skip":
                continue
            cs = spec["checksum"][0]
            cid = f"{d}-{size}-multi{sc['flows']}-{sc['order']}-csum{cs}-{spec['rate_mode']}"
            cases.append(CaseParams(direction=d, frame_size=size, flow_mode="multi", flows=sc["flows"],
                                    bearers=None, checksum=cs, rate_mode=spec["rate_mode"],
                                    rate=spec["rate"], duration=spec["duration"],
                                    latency=spec["latency"], case_id=cid, order=sc["order"]))
    return cases, skipped
