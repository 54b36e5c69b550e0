"""Issue 35 item 4: the lab config is validated as data before anything is built (gtplab/lab/config.py,
its schema gtplab/lab/config_schema.py): numbers finite and in range, types checked, duplicate keys
refused, unknown keys named, each problem one line (exit 2, no traceback) from every command that
takes --lab-config. Every shipped config still validates. Unit tests: no lab is built (the commands
refuse the config before they build one)."""

from __future__ import annotations

import re
import secrets
import subprocess
from pathlib import Path

import pytest
import yaml

from gtplab.dut.sock import SocketKnobs
from gtplab.errors import UserError
from gtplab.lab import config as labconfig
from gtplab.lab import config_schema, external
from gtplab.pfcp import provision as prov
from tests.lib import REPO

GTPLAB = str(REPO / ".venv/bin/gtplab")
PFCP = "dut:\n  provision: pfcp\n  pfcp: {upf: embedded, n3: 10.201.0.1, n6: 10.202.0.1, %s}\n"
EXTERNAL = (REPO / "gtplab/lab/labs/embedded-eupf.yaml").read_text()

# each bad value the issue names, and the key path its one line must name
BAD = {
    "t1_nan": (PFCP % "t1: .nan", r"dut\.pfcp\.t1 \.nan: not a finite number"),
    "release_wait_inf": (PFCP % "release_wait: .inf", r"dut\.pfcp\.release_wait \.inf: not a finite number"),
    "ready_timeout_nan": (EXTERNAL.replace("    cpus: dut ", "    ready_timeout: .nan\n    cpus: dut "),
                          r"dut\.external\.ready_timeout \.nan: not a finite number"),
    "port_speed_nan": ("port_speed_bps: .nan\n", r"port_speed_bps \.nan: not a finite number"),
    "mtu_string": ("lab: {mtu: \"1500\"}\n", r"lab\.mtu '1500' must be an MTU in 1280\.\.3506"),
    "duplicate_key": ("name: a\ndut: {mode: pgwu}\nname: b\n",
                      r"line 3: name is given twice \(first on line 1\)"),
    "duplicate_nested_key": (PFCP % "t1: 1, t1: 2", r"line 3: dut\.pfcp\.t1 is given twice \(first on line 3\)"),
    "unknown_key": (PFCP % "t2: 1", r"unknown key\(s\) in dut\.pfcp: t2 \(allowed: .*t1"),
    "unknown_top_key": ("port_speed: 1\n", r"unknown key\(s\): port_speed \(allowed: "),
    # numbers in range, not only finite: a timer of 10^300 s is a typo (select() overflows on it)
    "t1_huge": (PFCP % "t1: 1.0e+300", r"dut\.pfcp\.t1 1e\+300 must be a number >= 0.001 \(seconds, at most 3600\)"),
    "heartbeat_string": (PFCP % "heartbeat: '10'", r"dut\.pfcp\.heartbeat '10' must be a number"),
    "ports_not_a_mapping": ("ports: 5\n", r"ports must be \{access: N, sgi: M\}"),
    "mtu_too_big": ("lab: {mtu: 9000}\n", r"lab\.mtu 9000 must be an MTU"),
    "share_cpus_string": ("lab: {share_cpus: 'yes'}\n", r"lab\.share_cpus must be true or false \(not 'yes'\)"),
    "threshold_nan": ("thresholds: {ndr_pps: {uplink: {64: .nan}}}\n",
                      r"thresholds\.ndr_pps\.uplink\.64 \.nan: not a finite number"),
    "threshold_key": ("thresholds: {ndr_pps: {uplink: {big: 5}}}\n", r"thresholds\.ndr_pps\.uplink: bad key 'big'"),
    "not_a_mapping": ("- a\n- b\n", r"a lab config must be a mapping"),
}


def write(tmp_path: Path, text: str, name: str = "bad.yaml") -> str:
    f = tmp_path / name
    f.write_text(text)
    return str(f)


# ---- the shipped configs -------------------------------------------------------------------------

@pytest.mark.parametrize("path", sorted((REPO / "gtplab/lab/labs").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_lab_config_validates(path):
    assert config_schema.validate(yaml.safe_load(path.read_text())) is None
    assert labconfig.load(str(path)).name == path.stem


def test_the_schema_names_the_keys_its_sections_parsers_take():
    """dut.pfcp and dut.external are in full in the schema (their numbers' ranges): the same keys as
    their parsers, so that a key added to one and not the other is found here."""
    dut = config_schema.SCHEMA["properties"]["dut"]["properties"]
    assert set(dut["pfcp"]["properties"]) == prov._PFCP_KEYS
    assert set(dut["external"]["properties"]) == external._KEYS
    assert set(dut["external"]["properties"]["cpus"]["enum"]) == set(external.CPU_CHOICES)
    assert {"socket", "prometheus", "eupf"} <= set(dut)           # typed; their parsers check the rest
    assert SocketKnobs.parse(None) == SocketKnobs()


# ---- one line per problem, naming the key path ---------------------------------------------------

@pytest.mark.parametrize("name", list(BAD))
def test_bad_values_are_one_line_naming_the_key_path(tmp_path, name):
    text, msg = BAD[name]
    f = write(tmp_path, text)
    with pytest.raises(UserError, match=msg) as e:
        labconfig.load(f)
    line = str(e.value)
    assert "\n" not in line and line.startswith(f"lab config {f}: "), line


@pytest.mark.parametrize("name", ["t1_nan", "release_wait_inf", "port_speed_nan", "mtu_string",
                                  "duplicate_key", "unknown_key"])
def test_sweep_refuses_a_bad_config_before_it_builds_anything(tmp_path, name):
    """Through the command line: exit 2, one line, no traceback, no results directory, no lab."""
    text, msg = BAD[name]
    f = write(tmp_path, text)
    out = tmp_path / "results"
    p = subprocess.run([GTPLAB, "sweep", "--lab-config", f, "--out", str(out), "--no-scale", "--sizes", "128"],
                       capture_output=True, text=True, timeout=60, cwd=REPO)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gtplab sweep: lab config {f}: "), p.stderr
    assert re.search(msg, lines[0]), lines[0]
    assert "Traceback" not in p.stderr and not out.exists()


def test_the_first_problem_in_the_file_is_the_one_named(tmp_path):
    """Several problems: the first in the file's order, whatever the schema's order of checks."""
    f = write(tmp_path, "lab: {mtu: x}\nbackend: ixia\nport_speed_bps: -1\n")
    with pytest.raises(UserError, match=r"lab\.mtu 'x'"):
        labconfig.load(f)


@pytest.mark.parametrize("argv", [["lab", "up"], ["pfcp"], ["upftest", "policing"], ["conformance"]],
                         ids=lambda a: a[0])
def test_every_command_that_loads_a_lab_config_refuses_it_with_exit_2(tmp_path, argv):
    f = write(tmp_path, BAD["t1_nan"][0])
    name = f"lc{secrets.token_hex(3)}"
    extra = ["--name", name] if argv[0] == "lab" else []
    try:
        p = subprocess.run([GTPLAB, *argv, *extra, "--lab-config", f], capture_output=True, text=True,
                           timeout=60, cwd=tmp_path)
        assert p.returncode == 2, p.stderr
        assert p.stderr.splitlines() == [f"gtplab {argv[0]}: lab config {f}: dut.pfcp.t1 .nan: not a finite number"]
        assert not Path(f"/run/gtplab/labs/{name}.json").exists()
    finally:
        # a loader that lets the config through builds the lab (lab up leaves it up): take it down
        if Path(f"/run/gtplab/labs/{name}.json").exists():
            subprocess.run([GTPLAB, "lab", "down", "--name", name], capture_output=True, timeout=120)


# ---- bounded: what a lab config file can make the loader do --------------------------------------

def test_a_huge_deep_aliased_or_binary_file_is_refused_at_once(tmp_path):
    cases = {
        "big.yaml": ("description: " + "x" * (labconfig.MAX_BYTES + 10) + "\n", r"larger than 1024 KiB"),
        # the billion laughs: 9 levels of 9 aliases would be 9^9 values for whoever walks them
        "laughs.yaml": ("a: &a [x, x, x, x, x, x, x, x, x]\n"
                        + "".join(f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n"
                                  for p, c in zip("abcdefgh", "bcdefghi")),
                        r"b\[0\]: an alias of line 1: YAML aliases \(\*, <<\) are not read"),
        "merge.yaml": ("base: &b {mtu: 3200}\nlab:\n  <<: *b\n", r"line 3: lab: YAML merge keys \(<<\) are not read"),
        "deep.yaml": ("measured: " + "[" * 5000 + "]" * 5000 + "\n", r"nested deeper than 32 levels"),
        "binary.yaml": (None, r"not a text \(YAML\) file"),
    }
    for name, (text, msg) in cases.items():
        f = tmp_path / name
        if text is None:
            f.write_bytes(bytes(range(128, 256)) * 8)
        else:
            f.write_text(text)
        with pytest.raises(UserError, match=msg) as e:
            labconfig.load(str(f))
        assert "\n" not in str(e.value)
