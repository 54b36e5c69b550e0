"""The lab config as data: the JSON Schema (draft 2020-12) every lab config is checked against first.

    SCHEMA        the schema: every key, its type and its range; any other key is refused
    validate()    the first problem, in the order of the file, as one line naming the key path

gtplab.lab.config.load reads the YAML (duplicate keys, anchors and non-finite numbers are refused
there), then calls validate(), then checks what a schema does not say: one key against another
(dut.pfcp only with provision pfcp, a threshold above the line rate, the CPUs this host has, the
templates of dut.external). A "number" here is a finite int or float, never a bool; an "integer" an
int, never a bool or 5.0.

Sections with a parser of their own are checked by it and only typed here: dut.socket
(gtplab.dut.sock.SocketKnobs.parse), dut.prometheus (gtplab.dut.prometheus.parse_prometheus),
dut.eupf (gtplab.dut.upf_counters.parse_eupf), cpus (gtplab.lab.cpu.CpuLayout.parse). dut.pfcp
(gtplab.pfcp.provision.parse_config) and dut.external (gtplab.lab.external.parse_spec) are in full
here, for their numbers' ranges; tests/lab/test_labconfig.py keeps their keys the parsers' keys.

Keys this module adds to JSON Schema, for the one line a problem is reported in:
    x-error     the message for a bad value: "{path}" and "{value}" are filled in
    x-unknown   the message for a key not in properties: "{path}", "{keys}", "{allowed}"
"""

from __future__ import annotations

import math
from typing import Any

import jsonschema

from gtplab.lab.awake import METHODS as AWAKE_METHODS
from gtplab.pfcp import provision as prov
from gtplab.pfcp.rules import QFI_MAX

# what the embedded lab runs as the DUT (gtplab/lab/topology.py): the XDP PGW-U, the socket-path
# PGW-U (`pgwu socket`, with the knobs of dut.socket: gtplab/dut/sock.py), the reference forwarder,
# or any UPF the lab starts (dut.external, gtplab/lab/external.py)
DUT_MODES = ("pgwu", "socket", "fwd", "external")
GENERATORS = ("engine", "trex")  # what generates the embedded lab's traffic (gtplab/lab/topology.py)
MTU_RANGE = (1280, 3506)         # gtplab.lab.topology: 1280 .. VETH_XDP_MAX_MTU (veth native XDP)
MAX_TIMER_S = 3600.0             # a PFCP timer or a wait longer than an hour is a typo, not a setting

_NULL = {"type": "null"}


def _num(lo: float, hi: float, what: str, *, exclusive_lo: bool = False, null: bool = False) -> dict:
    s: dict[str, Any] = {"type": ["number", "null"] if null else "number", "maximum": hi,
                         "x-error": f"{{path}} {{value}} must be {what}"}
    s["exclusiveMinimum" if exclusive_lo else "minimum"] = lo
    return s


def _int(lo: int, hi: int, what: str, *, null: bool = False) -> dict:
    return {"type": ["integer", "null"] if null else "integer", "minimum": lo, "maximum": hi,
            "x-error": f"{{path}} {{value}} must be {what}"}


def _str(null: bool = False) -> dict:
    return {"type": ["string", "null"] if null else "string", "x-error": "{path} {value} must be a string"}


def _bool() -> dict:
    return {"type": "boolean", "x-error": "{path} must be true or false (not {value})"}


def _enum(values, what: str = "") -> dict:
    return {"enum": list(values), "x-error": f"{{path}} {{value}}: one of {', '.join(map(str, values))}{what}"}


def _obj(props: dict, *, null: bool = True, error: str | None = None, unknown: str | None = None, **kw) -> dict:
    s = {"type": ["object", "null"] if null else "object", "properties": props, "additionalProperties": False,
         "x-error": error or "{path} must be a mapping"}
    if unknown:
        s["x-unknown"] = unknown
    s.update(kw)
    return s


_CPUS = {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string"},
                   {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1}],
         "x-error": "{path} {value} is not a CPU list (e.g. 1, [2, 3] or \"2-3\")"}

_THRESHOLD_ENTRY = {"anyOf": [{"type": "number", "minimum": 0}, {"type": "string", "pattern": r"^[0-9.]+%$"}],
                    "x-error": "{path}: bad entry {value} (pps, or \"N%\" of line rate)"}
_THRESHOLD_SIZES = {"type": ["object", "null"],
                    # a key's error has the mapping's path and the key as its value
                    "propertyNames": {"anyOf": [{"type": "integer", "minimum": 1}, {"const": "default"}],
                                      "x-error": "{path}: bad key {value} (a frame size or default)"},
                    "additionalProperties": _THRESHOLD_ENTRY,
                    "x-error": "{path} must map frame sizes (or default) to pps"}
_THRESHOLD_TABLE = _obj({"uplink": _THRESHOLD_SIZES, "downlink": _THRESHOLD_SIZES},
                        error="{path} must map uplink/downlink to {{frame size|default: pps}}",
                        unknown="{path} must map uplink/downlink to {{frame size|default: pps}} (not {keys})")

PFCP = _obj({
    "upf": {"type": "string", "x-error": "{path} {value}: use HOST[:PORT], embedded or lab"},
    "local": _str(null=True),
    "listen_port": _int(0, 65535, "a UDP port, 0..65535 (0: any free one)", null=True),
    "node_id": _str(null=True),
    # the UPF's N3 address, IPv4 or IPv6, or one of each (GTP-U over IPv6: gtplab/pfcp/provision.py checks them)
    "n3": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2}],
           "x-error": "{path} {value}: an IPv4 or IPv6 address, or a list of one of each"},
    "n6": _str(),
    "choose": {"enum": ["auto", True, False], "x-error": "{path} {value} must be auto, true or false"},
    "urr": _bool(),
    "mbr_kbps": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": (1 << 40) - 1},
                 "minItems": 2, "maxItems": 2, "x-error": "{path} must be [uplink, downlink] in kbit/s"},
    "qfi": _int(0, QFI_MAX, f"a QFI, 0..{QFI_MAX}", null=True),
    "network_instance": _obj({"access": _str(null=True), "core": _str(null=True)},
                             error="{path} must be {{access: NAME, core: NAME}}"),
    "window": _int(1, 65536, "a number >= 1 of requests in flight (at most 65536)"),
    "t1": _num(0.001, MAX_TIMER_S, f"a number >= 0.001 (seconds, at most {MAX_TIMER_S:g})"),
    "n1": _int(0, 100, "a number >= 0 of retransmissions (at most 100)"),
    "heartbeat": _num(0, MAX_TIMER_S, f"a number >= 0 (seconds, at most {MAX_TIMER_S:g})"),
    "release_wait": _num(0.001, MAX_TIMER_S, f"a number >= 0.001 (seconds, at most {MAX_TIMER_S:g})"),
}, error="{path} must be a mapping (upf, n3, n6, ...)")

EXTERNAL = _obj({
    "runtime": _str(null=True), "runtime_env": _str(null=True), "config_file": _str(null=True),
    "config": _str(null=True), "start": _str(null=True), "stop": _str(null=True),
    "setup": {"type": ["array", "null"],
              "items": {"type": "string", "minLength": 1, "x-error": "{path} {value} must be a shell command (a string)"},
              "x-error": "{path} must be a list of shell commands (strings)"},
    "vars": {"type": ["object", "null"], "x-error": "{path} must map names to values"},
    "cpus": _enum(("dut", "generator", "all")),
    "xdp": _bool(),
    "ready_timeout": _num(0, MAX_TIMER_S, f"a number of seconds > 0 (at most {MAX_TIMER_S:g})",
                          exclusive_lo=True),
}, error="{path} must be a mapping (start, config, runtime, ...)")

DUT = _obj({
    "mode": _enum(DUT_MODES, " (the reference forwarder is fwd)"),
    "name": {"type": ["string", "number", "null"], "x-error": "{path} {value} must be a name (a string)"},
    "metrics_url": _str(null=True), "node_exporter_url": _str(null=True),
    # "user@host", or {host, user, port, key, options: ["-o", "K=V", ...]} (gtplab.dut.metrics.ssh_commands)
    "ssh": {"anyOf": [_NULL, {"type": "string", "minLength": 1},
                      _obj({"host": {"type": "string", "minLength": 1}, "user": _str(null=True),
                            "port": _int(1, 65535, "a TCP port (1..65535)", null=True),
                            "key": _str(null=True),
                            "options": {"type": ["array", "null"], "items": {"type": "string"}}},
                           null=False, required=["host"])],
            "x-error": "{path} must be user@host or {{host, user, port, key, options: [ssh options]}}"},
    "pgwu": _str(null=True), "pin_dir": _str(null=True),
    "provision": _enum(prov.PROVISION),
    "counters": _enum(prov.COUNTERS),
    "max_bearers": _int(1, (1 << 32) - 1, "a number of bearers >= 1", null=True),
    "pfcp": PFCP,
    "external": EXTERNAL,
    # checked by their own parsers (module doc): only their type here
    "socket": {"type": ["object", "null"], "x-error": "{path} must be a mapping of knobs"},
    "prometheus": {"type": ["object", "null"], "x-error": "{path} must be {{url: ..., metrics: {{fwd: ...}}}}"},
    "eupf": {"type": ["object", "null"], "x-error": "{path} must be {{api: http://HOST:PORT}}"},
})

SCHEMA: dict[str, Any] = _obj({
    "name": _str(null=True),
    "description": _str(null=True),
    "backend": {"enum": ["local", "trex"], "x-error": "{path} {value}: use local or trex"},
    "trex_server": _str(null=True),
    "ports": _obj({"access": {"type": "integer", "minimum": 0, "maximum": 255},
                   "sgi": {"type": "integer", "minimum": 0, "maximum": 255}},
                  error="ports must be {{access: N, sgi: M}} with port numbers (0..255)",
                  unknown="ports must be {{access: N, sgi: M}} with port numbers (not {keys})",
                  required=["access", "sgi"]),
    # several generator port pairs in one case (gtplab/measure/pairs.py): ports are not required here,
    # so a pair missing one gets pairs.parse_generators's message, which names it
    "generators": {"type": ["array", "null"], "items": _obj({
        "trex_server": _str(null=True),
        "ports": _obj({"access": {"type": "integer", "minimum": 0, "maximum": 255},
                       "sgi": {"type": "integer", "minimum": 0, "maximum": 255}},
                      error="{path} must be {{access: N, sgi: M}} with port numbers (0..255)",
                      unknown="{path} must be {{access: N, sgi: M}} (not {keys})"),
        "sgw_base": _str(null=True), "pdn_base": _str(null=True), "netns": _str(null=True),
    }, null=False, error="{path} must be {{trex_server, ports: {{access, sgi}}, sgw_base, pdn_base}}",
        unknown="{path}: unknown {keys} (trex_server, ports, sgw_base, pdn_base, netns)"),
        "x-error": "{path} must be a list of {{trex_server, ports: {{access: N, sgi: M}}}}"},
    "port_speed_bps": _num(0, 1e13, "a positive number (bits per second, e.g. 10000000000)", exclusive_lo=True),
    "max_rate_pps": _num(0, 1e10, "a positive number (packets per second)", exclusive_lo=True, null=True),
    "cpu_shared_with_generator": _bool(),
    "cpus": {"anyOf": [_NULL, {"const": "auto"},
                       {"type": "object", "properties": {"generator": _CPUS, "dut": _CPUS},
                        "required": ["generator", "dut"], "additionalProperties": False}],
             "x-error": "{path}: give {{generator: CPUS, dut: CPUS}} (e.g. generator: 0, dut: 1) or auto"},
    "lab": _obj({
        "mtu": _int(*MTU_RANGE, f"an MTU in {MTU_RANGE[0]}..{MTU_RANGE[1]} (bytes; veth native XDP's limit)"),
        "generator": _enum(GENERATORS),
        "awake": _enum(AWAKE_METHODS, " (how the DUT CPUs are kept out of halt)"),
        "share_cpus": _bool(),
    }),
    "dut": DUT,
    "thresholds": _obj({
        "pdr_loss": {"type": "number", "minimum": 0, "exclusiveMaximum": 1,
                     "x-error": "{path} {value} must be a ratio 0..1 (0.001 = 0.1 %)"},
        "ndr_pps": _THRESHOLD_TABLE, "pdr_pps": _THRESHOLD_TABLE,
    }),
    "measured": {"type": ["string", "null"], "x-error": "{path} must be text"},
    "trex": _obj({"runtime": {"type": ["string", "null"],
                              "x-error": "{path} {value}: a TRex directory or release tarball (a path)"}}),
}, null=False, error="a lab config must be a mapping (name, backend, dut, ...)")


# ------------------------------------------------------------------------------------------ checking

def _finite_number(checker, v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _integer(checker, v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many(
        {"number": _finite_number, "integer": _integer}))
_Validator.check_schema(SCHEMA)
_VALIDATOR = _Validator(SCHEMA)


def show(v: Any) -> str:
    """A value as the message shows it: YAML's spelling for what YAML and Python spell apart."""
    if isinstance(v, float) and not math.isfinite(v):
        return ".nan" if math.isnan(v) else (".inf" if v > 0 else "-.inf")
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _path_text(instance: Any, path) -> str:
    """The dotted key path, with list indexes as [i] (a mapping's int key, a frame size, as .1518)."""
    out, node = "", instance
    for p in path:
        if isinstance(node, list):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
        try:
            node = node[p]
        except (KeyError, IndexError, TypeError):
            node = None
    return out or "(the file)"


def _order(instance: Any, path) -> tuple:
    """Where path is in the document: the position of each key in its mapping (YAML's order)."""
    out, node = [], instance
    for p in path:
        if isinstance(node, dict):
            keys = list(node)
            out.append(keys.index(p) if p in keys else len(keys))
        else:
            out.append(p if isinstance(p, int) else 0)
        try:
            node = node[p]
        except (KeyError, IndexError, TypeError):
            node = None
    return tuple(out)


def _message(instance: Any, e: jsonschema.ValidationError) -> str:
    path = _path_text(instance, e.absolute_path)
    schema = e.schema if isinstance(e.schema, dict) else {}
    if e.validator == "additionalProperties" and isinstance(e.instance, dict):
        allowed = list(schema.get("properties", {}))
        extra = [k for k in e.instance if k not in allowed]
        if allowed or "x-unknown" in schema:
            keys = ", ".join(map(str, extra))
            if "x-unknown" in schema:
                return schema["x-unknown"].format(path=path, keys=keys, allowed=", ".join(allowed))
            where = f" in {path}" if e.absolute_path else ""
            return f"unknown key(s){where}: {keys} (allowed: {', '.join(sorted(allowed))})"
    if "x-error" in schema:
        return schema["x-error"].format(path=path, value=show(e.instance))
    return f"{path} {show(e.instance)}: {e.message}"


def validate(data: Any) -> str | None:
    """The first problem of data (a lab config as YAML read it) as one line, or None."""
    errors = list(_VALIDATOR.iter_errors(data))
    if not errors:
        return None
    e = min(errors, key=lambda e: _order(data, e.absolute_path))
    return _message(data, e)
