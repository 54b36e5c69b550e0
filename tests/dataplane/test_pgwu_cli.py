"""The `pgwu` control tool (dataplane/pgwu), run as a subprocess against its real pinned maps.

Each test gets its own PIN_DIR (/sys/fs/bpf/gtplab-test-<id>) that a fixture always unloads and
removes. What pgwu says is cross-checked against the maps themselves (gtplab.dut.dataplane reads them
with bpf(2) directly), and every failing call is checked to leave the tables exactly as they were.
Tests marked `lab` attach to a veth pair inside their own network namespace.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from gtplab.kernel import bpf
from gtplab.dut.dataplane import REASONS, VERDICTS, Dataplane, pgwu_binary
from tests.lib import oracle as O
from tests.lib.pgwu import pgwu

pytestmark = pytest.mark.bpf     # pgwu against its real pinned maps

PGWU = str(pgwu_binary())
LINK_PREFIX = "link_xdp_"


def ok(pin_dir: str, *args: str, **kw) -> str:
    return pgwu(pin_dir, *args, **kw).stdout


def bearers(pin_dir: str) -> list[dict]:
    return json.loads(ok(pin_dir, "session", "list", "--json"))["bearers"]


@pytest.fixture(scope="module", autouse=True)
def built():
    if not os.access(PGWU, os.X_OK):
        pytest.fail(f"{PGWU} is not built: run `make -C dataplane` first")


@pytest.fixture
def pin_dir():
    """A unique PIN_DIR, not loaded. Unloaded and removed afterwards whatever happened."""
    d = f"/sys/fs/bpf/gtplab-test-{secrets.token_hex(4)}"
    try:
        yield d
    finally:
        if os.path.exists(d):
            pgwu(d, "unload", check=False)
        if os.path.isdir(d):
            shutil.rmtree(d, ignore_errors=True)  # only our own, uniquely named dir


@pytest.fixture
def loaded(pin_dir):
    ok(pin_dir, "load", "--max-bearers", "64", "--local-addr", "192.0.2.10", "--ue-pool", "10.45.0.0/16")
    return pin_dir


def add(pin_dir: str, teid, ue: str, sgw: str = "192.0.2.1", sgw_teid=0x100, *extra: str,
        timeout: float = 120):
    return pgwu(pin_dir, "session", "add", "--teid", str(teid), "--ue", ue, "--sgw", sgw,
                "--sgw-teid", str(sgw_teid), *extra, timeout=timeout, check=False)


# ---- load / unload ------------------------------------------------------------------------------

def test_load_pins_everything_and_unload_leaves_nothing(pin_dir):
    out = ok(pin_dir, "load", "--max-bearers", "1000")
    assert "capacity 1000" in out
    names = set(os.listdir(pin_dir))
    assert {"ul_bearers", "dl_bearers", "stats", "config", "fib_cache", "fib_gen", "ip_id",
            "xdp_access", "xdp_sgi"} <= names
    with bpf.Map.pinned(f"{pin_dir}/ul_bearers") as m:
        assert m.max_entries == 1000
    with bpf.Map.pinned(f"{pin_dir}/dl_bearers") as m:
        assert m.max_entries == 1000
    # every tracing program that is pinned also has its pinned link, or the FIB cache is off
    tracing = {n for n in names if n.startswith("fib_gen_")}
    with Dataplane(pin_dir) as dp:
        fib_cache = dp.get_config().fib_cache
    if fib_cache:
        assert tracing and {f"link_{t}" for t in tracing} <= names
    with bpf.Prog.pinned(f"{pin_dir}/xdp_access") as p:
        prog_id = p.info().id

    ok(pin_dir, "unload")
    assert not os.path.exists(pin_dir)
    # nothing holds the program any more: the kernel frees it (asynchronously, hence the poll)
    deadline = time.monotonic() + 10
    while subprocess.run(["bpftool", "prog", "show", "id", str(prog_id)],
                         capture_output=True).returncode == 0:
        assert time.monotonic() < deadline, f"program {prog_id} still loaded after unload"
        time.sleep(0.1)


def test_load_defaults_config(pin_dir):
    ok(pin_dir, "load", "--no-fib-cache")
    with Dataplane(pin_dir) as dp:
        cfg = dp.get_config()
        assert dp.maps["ul_bearers"].max_entries == 1048576
    assert cfg.csum is True and cfg.fib_cache is False
    assert cfg.local_addr == "0.0.0.0" and cfg.ue_pool == "0.0.0.0/0" and cfg.restart_counter == 0


def test_load_options_reach_the_config_map(pin_dir):
    ok(pin_dir, "load", "--local-addr", "198.51.100.1", "--ue-pool", "10.0.0.0/8", "--csum", "off",
       "--restart-counter", "7")
    with Dataplane(pin_dir) as dp:
        cfg = dp.get_config()
    assert (cfg.local_addr, cfg.ue_pool, cfg.csum, cfg.restart_counter) == ("198.51.100.1", "10.0.0.0/8",
                                                                             False, 7)


def test_double_load_fails_and_keeps_the_first(loaded):
    assert add(loaded, 1, "10.45.0.1").returncode == 0
    cp = pgwu(loaded, "load", check=False)
    assert cp.returncode == 1
    assert "already loaded" in cp.stderr
    assert [b["teid"] for b in bearers(loaded)] == [1]


# What the kernel's verifier walks to load the four XDP programs (bpf_prog_info.verified_insns):
# its time is paid by every `pgwu load` of the suite (docs/testing.md, "pgwu load and the
# verifier"). 2,151,973 before that cut (xdp_access alone 949,119 of its limit of 1,000,000),
# 677,791 after it on this kernel (6.18) for those four. Every XDP program pinned is counted (the
# tail-called xdp_cp, xdp_ul_n3v6 and xdp_dl_n3v6 came after, and a new one cannot escape the
# bound): 1,016,999 for the seven (their full-datagram checksums through pgwu_csum_bytes, and
# xdp_ul_n3v6 105,844 once it read the GTP-U type once and masked the T-PDU's offset as xdp_access
# does: 338,272 before; xdp_dl_n3v6 205,651). The bound: about
# 1.18x of that (the seven as merged, 1,653,247, failed it; 1,249,427 with the checksums global
# only), still half of what the first four alone walked before the cut.
XDP_PROGS = ("xdp_access", "xdp_sgi", "xdp_access6", "xdp_sgi6", "xdp_cp", "xdp_ul_n3v6", "xdp_dl_n3v6")
VERIFIED_INSNS_MAX = 1_200_000


def test_load_verifies_the_xdp_programs_in_under_1_2_million_instructions(loaded, record_property):
    pinned = sorted(n for n in os.listdir(loaded) if n.startswith("xdp_"))
    assert set(XDP_PROGS) <= set(pinned), pinned
    walked = {}
    for name in pinned:
        with bpf.Prog.pinned(f"{loaded}/{name}") as p:
            walked[name] = p.info().verified_insns
    record_property("verified_insns", walked)
    assert all(walked.values()), walked     # the kernel reports it (5.16+)
    assert sum(walked.values()) < VERIFIED_INSNS_MAX, walked


def test_load_failure_leaves_no_pin_dir(pin_dir):
    # a usage error loads nothing
    cp = pgwu(pin_dir, "load", "--max-bearers", "0", check=False)
    assert cp.returncode == 2 and "--max-bearers" in cp.stderr
    assert not os.path.exists(pin_dir)
    # a PIN_DIR that is not on bpffs: pinning fails midway, what was created is removed
    tmp = f"/tmp/gtplab-test-{secrets.token_hex(4)}/pgwu"
    cp = pgwu(tmp, "load", check=False)
    assert cp.returncode == 1 and "not on a bpf filesystem" in cp.stderr
    assert not os.path.exists(os.path.dirname(tmp))


MEM_LINE = re.compile(r"memory for (\d+) bearers: ([\d.]+) MiB at load \(hash buckets ([\d.]+), bearer index "
                      r"([\d.]+), counters ([\d.]+)\), ([\d.]+) MiB with every bearer installed "
                      r"\((\d+) bytes a bearer\)")


def kernel_memlock(pin_dir: str) -> int:
    """What the kernel accounts for every pinned map (the 'memlock' of its fdinfo), in bytes."""
    total = 0
    for name in os.listdir(pin_dir):
        cp = subprocess.run(["bpftool", "-j", "map", "show", "pinned", f"{pin_dir}/{name}"],
                            capture_output=True, text=True, timeout=30)
        if cp.returncode == 0:  # programs and links are not maps
            total += json.loads(cp.stdout)["bytes_memlock"]
    return total


def test_load_prints_the_memory_the_kernel_then_accounts(pin_dir, tmp_path):
    """The figures pgwu load prints agree with the kernel's own accounting of the maps, at load and
    per installed bearer (within 1 %)."""
    out = ok(pin_dir, "load", "--max-bearers", "65536")
    m = MEM_LINE.search(out)
    assert m and int(m[1]) == 65536, out
    at_load, per_bearer = float(m[2]) * 2**20, int(m[7])
    assert abs(float(m[3]) + float(m[4]) + float(m[5]) - float(m[2])) < 0.2
    assert float(m[6]) == pytest.approx(float(m[2]) + per_bearer * 65536 / 2**20, abs=0.1)
    empty = kernel_memlock(pin_dir)
    assert empty == pytest.approx(at_load, rel=0.01), (empty, at_load)
    f = tmp_path / "b.txt"
    f.write_text("".join(f"{i} 10.{i >> 16}.{(i >> 8) & 255}.{i & 255} 192.0.2.1 {i}\n"
                         for i in range(1, 20001)))
    ok(pin_dir, "session", "load", str(f))
    grown = kernel_memlock(pin_dir) - empty
    assert grown == pytest.approx(per_bearer * 20000, rel=0.01), (grown, per_bearer)


@pytest.mark.timing
def test_load_refuses_a_capacity_the_host_cannot_hold(pin_dir, record_property):
    """--max-bearers 134217728 (the largest) took 20 s and 16 GiB before any check: now refused
    before anything is created when the full tables would not fit in MemAvailable."""
    avail_kb = int(re.search(r"MemAvailable:\s+(\d+) kB", Path("/proc/meminfo").read_text())[1])
    env = None
    if avail_kb * 1024 > 45 * 2**30:  # a host that could hold it: make it one that cannot
        env = dict(os.environ, PGWU_TEST_MEMAVAILABLE_KB=str(8 * 2**20))
    t0 = time.monotonic()
    cp = pgwu(pin_dir, "load", "--max-bearers", "134217728", env=env, check=False)
    took = time.monotonic() - t0
    assert cp.returncode == 1, cp
    m = re.search(r"Capacity 134217728 bearers needs ([\d.]+) MiB with every bearer installed "
                  r"\(([\d.]+) MiB at load: hash buckets ([\d.]+), bearer index 24576\.0, counters ([\d.]+); "
                  r"184 bytes a bearer\), more than this host has available \(MemAvailable [\d.]+ MiB\): "
                  r"nothing loaded; the largest capacity that fits now is \d+", cp.stderr)
    assert m, cp.stderr
    full, at_load, buckets, counters = (float(x) for x in m.groups())
    # five hash tables of 2^27 buckets of 16 B (10240 MiB: the bearers' two, qos, and the IPv6 /64s'
    # dl6_bearers and ul6_prefix), the SDF filters' four (13 MiB: 65,536 lists, 262,144 PDRs, their
    # QERs and the URRs with a threshold or quota, sdf_urr, at most, whatever the capacity), the CP
    # function's relays (cp_relay, 262,144 at most), the N3 IPv6 peers (16 KiB) and the small maps'
    # few MiB: 10,258.6 MiB printed with sdf_urr (10,254.6 before it)
    assert 10256 <= buckets < 10261 and counters < 64, cp.stderr
    assert at_load == pytest.approx(buckets + 24576 + counters, abs=0.2)
    assert full == pytest.approx(at_load + 184 * 134217728 / 2**20, abs=0.2)
    record_property("refusal_s", round(took, 3))
    # refused before the tables are made: 0.01 s here (2026-11-28), the bound 200 x that; making them
    # first took 20 s, 10 x the bound
    assert took < 2, f"refused after {took:.2f} s: more than 2 s, as if the tables were made first"
    assert not os.path.exists(pin_dir)
    # the same check with a small host: the default capacity (~480 MiB full) does not fit in 200 MiB
    cp = pgwu(pin_dir, "load", env=dict(os.environ, PGWU_TEST_MEMAVAILABLE_KB=str(200 * 1024)), check=False)
    m = re.search(r"Capacity 1048576 bearers needs ([\d.]+) MiB", cp.stderr)
    assert cp.returncode == 1 and m and float(m[1]) > 200, cp.stderr
    fits = int(re.search(r"the largest capacity that fits now is (\d+)", cp.stderr)[1])
    assert not os.path.exists(pin_dir)
    # ... and the capacity it names does fit
    out = ok(pin_dir, "load", "--max-bearers", str(fits),
             env=dict(os.environ, PGWU_TEST_MEMAVAILABLE_KB=str(200 * 1024)))
    assert float(MEM_LINE.search(out)[6]) <= 200


def test_unload_and_commands_when_not_loaded(pin_dir):
    cp = pgwu(pin_dir, "unload", check=False)
    assert cp.returncode == 1 and f"pgwu is not loaded in {pin_dir}" in cp.stderr
    for args in (["session", "list"], ["stats"], ["config"], ["detach"],
                 ["session", "add", "--teid", "1", "--ue", "10.0.0.1", "--sgw", "10.0.0.2",
                  "--sgw-teid", "1"]):
        cp = pgwu(pin_dir, *args, check=False)
        assert cp.returncode == 1, args
        assert f"pgwu is not loaded in {pin_dir} (run pgwu load)" in cp.stderr, args
    assert not os.path.exists(pin_dir)


def test_pin_dir_from_environment(pin_dir):
    env = dict(os.environ, PGWU_PIN_DIR=pin_dir)
    ok(None, "load", env=env)
    assert os.path.exists(f"{pin_dir}/config")
    ok(None, "unload", env=env)
    assert not os.path.exists(pin_dir)


# ---- CLI ----------------------------------------------------------------------------------------

def test_help_and_usage_errors():
    cp = pgwu(None, "help", check=False)
    assert cp.returncode == 0
    for cmd in ("load", "unload", "attach", "detach", "config", "session", "stats", "metrics"):
        assert re.search(rf"^\s+{cmd}\s", cp.stdout, re.M), cmd
    cp = pgwu(None, "session", "add", "-h", check=False)
    assert cp.returncode == 0
    for opt in ("--teid T", "--ue A", "--sgw A", "--sgw-teid T", "--csum on|off|default"):
        assert opt in cp.stdout
    assert pgwu(None, "help", "session", "load", check=False).stdout.startswith("Usage: pgwu session load FILE")
    for args, msg in ((["frobnicate"], "Unknown command"), (["session", "frob"], "Unknown command"),
                      (["stats", "--bogus"], "Unknown option --bogus"),
                      (["session", "add", "--teid", "1"], "Missing required option"),
                      (["load", "--csum", "maybe"], "Invalid --csum"), ([], "Missing command"),
                      (["config", "--local-addr6", "10.0.0.1"], "Invalid --local-addr6"),
                      (["load", "--local-addr6", "fd00::1::2"], "Invalid --local-addr6")):
        cp = pgwu(None, *args, check=False)
        assert cp.returncode == 2, args
        assert msg in cp.stderr, (args, cp.stderr)


# ---- sessions -----------------------------------------------------------------------------------

def test_session_round_trip(loaded):
    assert add(loaded, 100, "10.45.0.1", "192.0.2.1", 0x1000).returncode == 0
    assert add(loaded, "0x65", "10.45.0.2", "192.0.2.2", 7, "--csum", "off").returncode == 0

    got = json.loads(ok(loaded, "session", "get", "--teid", "100", "--json"))
    assert got == {"teid": 100, "ue": "10.45.0.1", "sgw": "192.0.2.1", "sgw_teid": 0x1000, "csum": "default",
                   "qfi": None, "ul_qfi": None, "owner": "pgwu", "pfcp": None,
                   "uplink": {"packets": 0, "bytes": 0}, "downlink": {"packets": 0, "bytes": 0}}
    assert json.loads(ok(loaded, "session", "get", "--ue", "10.45.0.1", "--json")) == got
    listed = json.loads(ok(loaded, "session", "list", "--json"))
    assert listed["capacity"] == 64 and listed["uplink"] == 2 and listed["downlink"] == 2
    assert [(b["teid"], b["ue"], b["sgw"], b["sgw_teid"], b["csum"]) for b in listed["bearers"]] == [
        (100, "10.45.0.1", "192.0.2.1", 0x1000, "default"), (101, "10.45.0.2", "192.0.2.2", 7, "off")]

    # what the maps hold: network byte order keys and fields, the two halves joined by local TEID
    with Dataplane(loaded) as dp:
        ul, dl = dp.ul_bearer(101), dp.dl_bearer("10.45.0.2")
        assert ul.ue_addr == "10.45.0.2"
        assert (dl.sgw_addr, dl.sgw_teid, dl.local_teid, dl.flags) == ("192.0.2.2", 7, 101, 2)
        # usage counters come from the maps
        dp.maps["ul_bearers"].update(struct.pack("!I", 101), struct.pack("=4sIQQ", bytes([10, 45, 0, 2]),
                                                                         0, 3, 300))
    got = json.loads(ok(loaded, "session", "get", "--teid", "101", "--json"))
    assert got["uplink"] == {"packets": 3, "bytes": 300}
    human = ok(loaded, "session", "get", "--ue", "10.45.0.2")
    assert re.search(r"^101\s+10\.45\.0\.2\s+192\.0\.2\.2\s+7\s+off\s+-\s+3\s+300\s+0\s+0$", human, re.M)

    ok(loaded, "session", "del", "--teid", "100")
    ok(loaded, "session", "del", "--ue", "10.45.0.2")
    assert bearers(loaded) == []
    with Dataplane(loaded) as dp:
        assert dp.ul_bearer(100) is None and dp.dl_bearer("10.45.0.1") is None


BAD_ADDS = [
    (["--teid", "5", "--ue", "10.45.0.256", "--sgw", "192.0.2.1", "--sgw-teid", "1"], 2, "Invalid --ue"),
    (["--teid", "5", "--ue", "10.45.0.9", "--sgw", "gw", "--sgw-teid", "1"], 2, "Invalid --sgw"),
    (["--teid", "0", "--ue", "10.45.0.9", "--sgw", "192.0.2.1", "--sgw-teid", "1"], 2, "Invalid --teid"),
    (["--teid", "0x100000000", "--ue", "10.45.0.9", "--sgw", "192.0.2.1", "--sgw-teid", "1"], 2,
     "Invalid --teid"),
    (["--teid", "4294967296", "--ue", "10.45.0.9", "--sgw", "192.0.2.1", "--sgw-teid", "1"], 2,
     "Invalid --teid"),
    (["--teid", "12ab", "--ue", "10.45.0.9", "--sgw", "192.0.2.1", "--sgw-teid", "1"], 2, "Invalid --teid"),
    (["--teid", "5", "--ue", "10.45.0.9", "--sgw", "192.0.2.1", "--sgw-teid", "-1"], 2, "Invalid --sgw-teid"),
    (["--teid", "5", "--ue", "10.45.0.9", "--sgw", "192.0.2.1"], 2, "Missing required option --sgw-teid"),
    (["--teid", "5", "--ue", "10.45.0.9", "--sgw", "192.0.2.1", "--sgw-teid", "1", "--csum", "yes"], 2,
     "Invalid --csum"),
    # a QFI is 6 bits (TS 38.415)
    (["--teid", "5", "--ue", "10.45.0.9", "--sgw", "192.0.2.1", "--sgw-teid", "1", "--qfi", "64"], 2,
     "Invalid --qfi '64': expected an integer in 0..63"),
    (["--teid", "5", "--ue", "10.45.0.9", "--sgw", "192.0.2.1", "--sgw-teid", "1", "--qfi", "-1"], 2,
     "Invalid --qfi '-1': expected an integer in 0..63"),
    (["--teid", "5", "--ue", "10.45.0.9", "--sgw", "192.0.2.1", "--sgw-teid", "1", "--qfi", "abc"], 2,
     "Invalid --qfi 'abc': expected an integer in 0..63"),
    (["--teid", "5", "--ue", "10.45.0.9", "--sgw", "192.0.2.1", "--sgw-teid", "1", "--qfi"], 2,
     "Option --qfi needs an argument"),
    # addresses that name no single host (issue 15): refused before the tables are touched
    (["--teid", "5", "--ue", "0.0.0.0", "--sgw", "192.0.2.1", "--sgw-teid", "1"], 2,
     "UE address 0.0.0.0 is the unspecified address 0.0.0.0: not a host"),
    (["--teid", "5", "--ue", "255.255.255.255", "--sgw", "192.0.2.1", "--sgw-teid", "1"], 2,
     "UE address 255.255.255.255 is the limited broadcast address: not a host"),
    (["--teid", "5", "--ue", "224.0.0.1", "--sgw", "192.0.2.1", "--sgw-teid", "1"], 2,
     "UE address 224.0.0.1 is a multicast address (224.0.0.0/4): not a host"),
    (["--teid", "5", "--ue", "239.255.255.255", "--sgw", "192.0.2.1", "--sgw-teid", "1"], 2,
     "UE address 239.255.255.255 is a multicast address"),
    (["--teid", "5", "--ue", "10.45.0.9", "--sgw", "0.0.0.0", "--sgw-teid", "1"], 2,
     "SGW address 0.0.0.0 is the unspecified address 0.0.0.0: not a host"),
    (["--teid", "5", "--ue", "10.45.0.9", "--sgw", "255.255.255.255", "--sgw-teid", "1"], 2,
     "SGW address 255.255.255.255 is the limited broadcast address"),
    (["--teid", "5", "--ue", "10.45.0.9", "--sgw", "232.1.2.3", "--sgw-teid", "1"], 2,
     "SGW address 232.1.2.3 is a multicast address"),
    # duplicates of the installed bearer (TEID 1, UE 10.45.0.1)
    (["--teid", "1", "--ue", "10.45.0.9", "--sgw", "192.0.2.1", "--sgw-teid", "1"], 1,
     "TEID 1 already has a bearer (UE 10.45.0.1)"),
    (["--teid", "9", "--ue", "10.45.0.1", "--sgw", "192.0.2.1", "--sgw-teid", "1"], 1,
     "UE 10.45.0.1 already has a bearer (TEID 1)"),
]


@pytest.mark.parametrize("args,rc,msg", BAD_ADDS, ids=[m for _, _, m in BAD_ADDS])
def test_session_add_bad_input_changes_nothing(loaded, args, rc, msg):
    assert add(loaded, 1, "10.45.0.1").returncode == 0
    before = bearers(loaded)
    cp = pgwu(loaded, "session", "add", *args, check=False)
    assert cp.returncode == rc
    assert msg in cp.stderr
    assert bearers(loaded) == before
    with Dataplane(loaded) as dp:  # no half-added bearer either
        assert len(list(dp.maps["ul_bearers"].keys())) == 1
        assert len(list(dp.maps["dl_bearers"].keys())) == 1


@pytest.mark.parametrize("args,rc,msg", [
    (["del", "--teid", "7"], 1, "No bearer with TEID 7"),
    (["del", "--ue", "10.45.9.9"], 1, "No bearer for UE 10.45.9.9"),
    (["del", "--teid", "1", "--ue", "10.45.0.1"], 2, "exactly one of --teid T or --ue A"),
    (["del"], 2, "exactly one of --teid T or --ue A"),
    (["get", "--teid", "7"], 1, "No bearer with TEID 7"),
    (["get", "--ue", "1.2.3"], 2, "Invalid --ue"),
])
def test_session_del_get_errors(loaded, args, rc, msg):
    assert add(loaded, 1, "10.45.0.1").returncode == 0
    before = bearers(loaded)
    cp = pgwu(loaded, "session", *args, check=False)
    assert cp.returncode == rc and msg in cp.stderr
    assert bearers(loaded) == before


def test_full_table(pin_dir):
    ok(pin_dir, "load", "--max-bearers", "4")
    for i in range(1, 5):
        assert add(pin_dir, i, f"10.45.0.{i}").returncode == 0
    before = bearers(pin_dir)
    cp = add(pin_dir, 5, "10.45.0.5")
    assert cp.returncode == 1
    assert "bearer table full (capacity 4)" in cp.stderr
    assert bearers(pin_dir) == before and [b["teid"] for b in before] == [1, 2, 3, 4]
    # room again after a delete
    ok(pin_dir, "session", "del", "--teid", "2")
    assert add(pin_dir, 5, "10.45.0.5").returncode == 0


def test_flush(loaded):
    for i in range(1, 11):
        assert add(loaded, i, f"10.45.0.{i}").returncode == 0
    assert "flushed 10 bearers" in ok(loaded, "session", "flush")
    assert bearers(loaded) == []


# ---- bulk load ----------------------------------------------------------------------------------

GOOD_FILE = """\
# TEID UE SGW SGW_TEID [csum]
1 10.45.0.1 192.0.2.1 100

0x2 10.45.0.2 192.0.2.2 0x200 csum=on   # trailing comment
3\t10.45.0.3\t192.0.2.3\t300 csum=off
4 10.45.0.4 192.0.2.4 400 csum=default
"""


def test_session_load_file(loaded, tmp_path):
    f = tmp_path / "bearers.txt"
    f.write_text(GOOD_FILE)
    assert "loaded 4 bearers" in ok(loaded, "session", "load", str(f))
    assert [(b["teid"], b["ue"], b["sgw"], b["sgw_teid"], b["csum"]) for b in bearers(loaded)] == [
        (1, "10.45.0.1", "192.0.2.1", 100, "default"), (2, "10.45.0.2", "192.0.2.2", 0x200, "on"),
        (3, "10.45.0.3", "192.0.2.3", 300, "off"), (4, "10.45.0.4", "192.0.2.4", 400, "default")]


BAD_LINES = [
    ("10 10.45.1.300 192.0.2.1 1", "bad UE address '10.45.1.300'"),
    ("10 10.45.1.10 192.0.2 1", "bad SGW address '192.0.2'"),
    ("0 10.45.1.10 192.0.2.1 1", "bad TEID '0'"),
    ("0x1ffffffff 10.45.1.10 192.0.2.1 1", "bad TEID '0x1ffffffff'"),
    ("10 10.45.1.10 192.0.2.1 x1", "bad SGW TEID 'x1'"),
    ("10 10.45.1.10 192.0.2.1", "got 3 fields"),
    ("10 10.45.1.10 192.0.2.1 1 csum=on qfi=1 ue6=fd00:1::/64 sgw6=fd47:7473::10 extra", "got 9 fields"),
    ("10 10.45.1.10 192.0.2.1 1 csum=on extra", "bad option 'extra'"),
    ("10 10.45.1.10 192.0.2.1 1 checksum", "bad option 'checksum'"),
    ("10 10.45.1.10 192.0.2.1 1 qfi=64", "bad QFI '64' (qfi=0..63)"),
    ("10 10.45.1.10 192.0.2.1 1 qfi=-1", "bad QFI '-1'"),
    ("10 10.45.1.10 192.0.2.1 1 qfi=abc", "bad QFI 'abc'"),
    ("10 10.45.1.10 192.0.2.1 1 qfi=", "bad QFI ''"),
    ("10 10.45.1.10 192.0.2.1 1 qfi=1 qfi=2", "'qfi=2': a second qfi= option (each at most once)"),
    ("10 10.45.1.10 192.0.2.1 1 csum=on csum=off", "'csum=off': a second csum= option"),
    ("10 0.0.0.0 192.0.2.1 1", "UE address '0.0.0.0' is the unspecified address 0.0.0.0: not a host"),
    ("10 255.255.255.255 192.0.2.1 1", "UE address '255.255.255.255' is the limited broadcast address"),
    ("10 224.0.0.251 192.0.2.1 1", "UE address '224.0.0.251' is a multicast address (224.0.0.0/4)"),
    ("10 10.45.1.10 0.0.0.0 1", "SGW address '0.0.0.0' is the unspecified address 0.0.0.0: not a host"),
    ("10 10.45.1.10 255.255.255.255 1", "SGW address '255.255.255.255' is the limited broadcast address"),
    ("10 10.45.1.10 239.1.1.1 1", "SGW address '239.1.1.1' is a multicast address"),
    ("2 10.45.1.10 192.0.2.1 1", "duplicate TEID 2 (also on line 3)"),
    ("10 10.45.1.2 192.0.2.1 1", "duplicate UE 10.45.1.2 (also on line 3)"),
]


def _raw_flags(pin_dir: str, teid: int, ue: str) -> tuple[int, int, int, int]:
    """The flags of both halves, in the hash maps and in their slots (the packet path reads both)."""
    from gtplab.dut.dataplane import UlBearer, DlBearer
    with Dataplane(pin_dir) as dp:
        k_ul, k_dl = struct.pack("!I", teid), bytes(map(int, ue.split(".")))
        s_ul, s_dl = dp._slot("ul", k_ul)[1], dp._slot("dl", k_dl)[1]
        assert s_ul is not None and s_dl is not None, "bearer not in the slot index"
        return (dp.ul_bearer(teid).flags, dp.dl_bearer(ue).flags,    # a slot: key, state, the bearer
                UlBearer.unpack(s_ul[8:8 + UlBearer.SIZE]).flags, DlBearer.unpack(s_dl[8:8 + DlBearer.SIZE]).flags)


def qfi_flags(q: int) -> int:
    from gtplab.dut.dataplane import B_QFI, B_QFI_SHIFT
    return B_QFI | q << B_QFI_SHIFT


def test_session_add_qfi_sets_both_halves_and_shows(loaded):
    """--qfi N writes the QFI into the uplink half (the UL PSC check) and the downlink half (the
    DL PSC marking), in the hash maps and in the slot index; get/list show it, --json as qfi/ul_qfi."""
    assert add(loaded, 1, "10.45.0.1", "192.0.2.1", 5, "--qfi", "9").returncode == 0
    assert add(loaded, 2, "10.45.0.2", "192.0.2.1", 6, "--qfi", "0", "--csum", "off").returncode == 0
    assert add(loaded, 3, "10.45.0.3", "192.0.2.1", 7, "--qfi=63").returncode == 0
    assert add(loaded, 4, "10.45.0.4", "192.0.2.1", 8).returncode == 0
    assert _raw_flags(loaded, 1, "10.45.0.1") == (qfi_flags(9),) * 4
    assert _raw_flags(loaded, 2, "10.45.0.2") == (qfi_flags(0), qfi_flags(0) | 2, qfi_flags(0), qfi_flags(0) | 2)
    assert _raw_flags(loaded, 3, "10.45.0.3") == (qfi_flags(63),) * 4
    assert _raw_flags(loaded, 4, "10.45.0.4") == (0, 0, 0, 0)
    assert [(b["teid"], b["qfi"], b["ul_qfi"], b["csum"]) for b in bearers(loaded)] == [
        (1, 9, 9, "default"), (2, 0, 0, "off"), (3, 63, 63, "default"), (4, None, None, "default")]
    got = json.loads(ok(loaded, "session", "get", "--ue", "10.45.0.1", "--json"))
    assert (got["qfi"], got["ul_qfi"], got["sgw_teid"]) == (9, 9, 5)
    human = ok(loaded, "session", "list")
    assert re.search(r"^TEID\s+UE\s+SGW\s+SGW_TEID\s+CSUM\s+QFI\s+UL_PACKETS", human, re.M)
    for teid, csum, q in ((1, "default", "9"), (2, "off", "0"), (3, "default", "63"), (4, "default", "-")):
        assert re.search(rf"^{teid}\s+10\.45\.0\.{teid}\s+192\.0\.2\.1\s+\d+\s+{csum}\s+{q}\s+0\s+0\s+0\s+0$",
                         human, re.M), human
    assert re.search(r"^1\s.*\s9\s+0\s+0\s+0\s+0$", ok(loaded, "session", "get", "--teid", "1"), re.M)
    assert "QFI 9" in add(loaded, 5, "10.45.0.5", "192.0.2.1", 8, "--qfi", "9").stdout


def test_session_add_qfi_writes_what_the_fixture_tables_install(loaded):
    """The QFI rows of tests/dataplane/test_dataplane.py install their bearers with Dataplane.add_bearer(qfi=);
    `session add --qfi` writes the same bytes (both hash entries, both slots), so those rows hold for
    a bearer an operator adds."""
    def raw(teid, ue):
        with Dataplane(loaded) as dp:
            k_ul, k_dl = struct.pack("!I", teid), bytes(map(int, ue.split(".")))
            return (dp.maps["ul_bearers"].lookup(k_ul), dp.maps["dl_bearers"].lookup(k_dl),
                    dp._slot("ul", k_ul)[1], dp._slot("dl", k_dl)[1])
    with Dataplane(loaded) as dp:
        dp.add_bearer(0x500, "10.45.0.5", "192.0.2.5", 0x5555, qfi=9)
    fixture = raw(0x500, "10.45.0.5")
    ok(loaded, "session", "del", "--teid", str(0x500))
    assert raw(0x500, "10.45.0.5")[:2] == (None, None)
    assert add(loaded, 0x500, "10.45.0.5", "192.0.2.5", 0x5555, "--qfi", "9").returncode == 0
    assert raw(0x500, "10.45.0.5") == fixture and None not in fixture


def test_session_qfi_halves_that_differ_are_shown_apart(loaded):
    """The two halves can disagree (a PFCP session's QER and uplink PDI QFIs are set apart): the
    table says UL/DL, the JSON has each."""
    assert add(loaded, 1, "10.45.0.1", "192.0.2.1", 5, "--qfi", "9").returncode == 0
    assert add(loaded, 2, "10.45.0.2", "192.0.2.1", 5, "--qfi", "4").returncode == 0
    from dataclasses import replace
    with Dataplane(loaded) as dp:      # the hash entries: what get/list read the flags from
        dp.maps["dl_bearers"].update(bytes([10, 45, 0, 1]),
                                     replace(dp.dl_bearer("10.45.0.1"), flags=qfi_flags(7)).pack())
        dp.maps["ul_bearers"].update(struct.pack("!I", 2), replace(dp.ul_bearer(2), flags=0).pack())
    got = {b["teid"]: (b["qfi"], b["ul_qfi"]) for b in bearers(loaded)}
    assert got == {1: (7, 9), 2: (4, None)}
    human = ok(loaded, "session", "list")
    assert re.search(r"^1\s.*\sdefault\s+9/7\s", human, re.M), human
    assert re.search(r"^2\s.*\sdefault\s+-/4\s", human, re.M), human


def test_session_load_qfi(loaded, tmp_path):
    f = tmp_path / "qfi.txt"
    f.write_text("1 10.45.0.1 192.0.2.1 100 qfi=5\n"
                 "2 10.45.0.2 192.0.2.1 200 csum=on qfi=0x3f\n"
                 "3 10.45.0.3 192.0.2.1 300 qfi=0 csum=off   # options in any order\n"
                 "4 10.45.0.4 192.0.2.1 400\n")
    assert "loaded 4 bearers" in ok(loaded, "session", "load", str(f))
    assert [(b["teid"], b["csum"], b["qfi"], b["ul_qfi"]) for b in bearers(loaded)] == [
        (1, "default", 5, 5), (2, "on", 63, 63), (3, "off", 0, 0), (4, "default", None, None)]
    assert _raw_flags(loaded, 1, "10.45.0.1") == (qfi_flags(5),) * 4
    assert _raw_flags(loaded, 3, "10.45.0.3") == (qfi_flags(0), qfi_flags(0) | 2, qfi_flags(0), qfi_flags(0) | 2)
    # unload takes the same format
    assert "deleted 4 bearers" in ok(loaded, "session", "unload", str(f))
    assert bearers(loaded) == []


def test_session_unload_deletes_exactly_the_listed_bearers(loaded, tmp_path):
    f = tmp_path / "bearers.txt"
    f.write_text(GOOD_FILE)
    ok(loaded, "session", "load", str(f))
    assert add(loaded, 9, "10.45.0.9").returncode == 0
    gone = tmp_path / "gone.txt"
    gone.write_text("0x2 10.45.0.2 192.0.2.2 0x200\n4 10.45.0.4 192.0.2.4 400\n")
    assert "deleted 2 bearers" in ok(loaded, "session", "unload", str(gone))
    assert [(b["teid"], b["ue"], b["sgw"], b["sgw_teid"], b["csum"]) for b in bearers(loaded)] == [
        (1, "10.45.0.1", "192.0.2.1", 100, "default"), (3, "10.45.0.3", "192.0.2.3", 300, "off"),
        (9, "10.45.0.9", "192.0.2.1", 0x100, "default")]


def test_session_commands_keep_the_slot_index_right(loaded, tmp_path):
    """pgwu keeps the direct index (ul_slots/dl_slots) in step with the hash maps: with 64 slots,
    TEIDs/UEs 64 apart share one. Packets for both bearers are forwarded and counted; deleting the
    indexed one (del, unload, flush) leaves the other forwarding, and a deleted one is dropped."""
    from gtplab.gtpu import packets as P
    from gtplab.dut.dataplane import Dataplane
    ok(loaded, "config", "--nexthop", "access", "lo", "02:00:00:00:00:01")
    ok(loaded, "config", "--nexthop", "sgi", "lo", "02:00:00:00:00:02")
    # a deleted bearer's G-PDU is dropped, not answered with an Error Indication (verdict tx)
    ok(loaded, "config", "--err-ind", "off")
    assert add(loaded, 1, "10.45.0.1").returncode == 0
    assert add(loaded, 65, "10.45.0.65", "192.0.2.1", 0x165).returncode == 0
    with Dataplane(loaded) as dp:
        def fwd(teid, ue):
            up = dp.run_access(bytes(P.gpdu(teid=teid, ue=ue, dst="198.51.100.10", outer_dst="192.0.2.10", size=200)))
            down = dp.run_sgi(bytes(P.downlink_ip(ue=ue, size=200)))
            return up.verdict, down.verdict

        assert fwd(1, "10.45.0.1") == fwd(65, "10.45.0.65") == ("tx", "tx")   # lo in, lo out
        ok(loaded, "session", "del", "--teid", "1")
        assert fwd(1, "10.45.0.1") == ("drop", "drop")
        assert fwd(65, "10.45.0.65") == ("tx", "tx")
        got = {b["teid"]: b for b in bearers(loaded)}
        assert (got[65]["uplink"]["packets"], got[65]["downlink"]["packets"]) == (2, 2)
        gone = tmp_path / "gone.txt"
        gone.write_text("65 10.45.0.65 192.0.2.1 0x165\n")
        ok(loaded, "session", "unload", str(gone))   # 65 was in the hash maps only
        assert fwd(65, "10.45.0.65") == ("drop", "drop")
        ok(loaded, "session", "load", str(gone))     # back, now in the free slot
        assert fwd(65, "10.45.0.65") == ("tx", "tx")
        assert {b["teid"]: b["uplink"]["packets"] for b in bearers(loaded)} == {65: 1}
        ok(loaded, "session", "unload", str(gone))   # and out of it
        assert fwd(65, "10.45.0.65") == ("drop", "drop")
        assert add(loaded, 1, "10.45.0.1").returncode == 0
        assert fwd(1, "10.45.0.1") == ("tx", "tx")
        ok(loaded, "session", "flush")
        assert fwd(1, "10.45.0.1") == ("drop", "drop")


@pytest.mark.parametrize("lines,msg", [
    ("1 10.45.0.1 192.0.2.1 100\n2 10.45.0.3 192.0.2.2 0x200\n", ":2: no bearer with TEID 2 and UE 10.45.0.3"),
    ("1 10.45.0.1 192.0.2.1 100\n7 10.45.0.7 192.0.2.2 1\n", ":2: no bearer with TEID 7 and UE 10.45.0.7"),
    ("1 10.45.0.1 192.0.2.1 100\n1 10.45.0.2 192.0.2.2 1\n", "duplicate TEID 1"),
])
def test_session_unload_bad_file_deletes_nothing(loaded, tmp_path, lines, msg):
    f = tmp_path / "bearers.txt"
    f.write_text(GOOD_FILE)
    ok(loaded, "session", "load", str(f))
    before = bearers(loaded)
    gone = tmp_path / "gone.txt"
    gone.write_text(lines)
    cp = pgwu(loaded, "session", "unload", str(gone), check=False)
    assert cp.returncode == 1 and msg in cp.stderr and "nothing deleted" in cp.stderr, cp.stderr
    assert bearers(loaded) == before


@pytest.mark.parametrize("bad,msg", BAD_LINES, ids=[m for _, m in BAD_LINES])
def test_session_load_bad_line_loads_nothing(loaded, tmp_path, bad, msg):
    assert add(loaded, 1000, "10.45.9.1").returncode == 0
    before = bearers(loaded)
    lines = ["# header", "1 10.45.1.1 192.0.2.1 1", "2 10.45.1.2 192.0.2.1 2", "",
             "3 10.45.1.3 192.0.2.1 3", "4 10.45.1.4 192.0.2.1 4", "5 10.45.1.5 192.0.2.1 5"]
    lines.insert(5, bad)  # line 6
    f = tmp_path / "bad.txt"
    f.write_text("\n".join(lines) + "\n")
    cp = pgwu(loaded, "session", "load", str(f), check=False)
    assert cp.returncode == 1
    assert re.search(rf"^{re.escape(str(f))}:6: .*{re.escape(msg)}", cp.stderr, re.M), cp.stderr
    assert "nothing loaded" in cp.stderr
    assert bearers(loaded) == before


@pytest.mark.parametrize("line,msg", [
    ("1000 10.45.1.7 192.0.2.1 7", "TEID 1000 already has a bearer (installed)"),
    ("7 10.45.9.1 192.0.2.1 7", "UE 10.45.9.1 already has a bearer (installed)"),
])
def test_session_load_duplicate_of_installed(loaded, tmp_path, line, msg):
    assert add(loaded, 1000, "10.45.9.1").returncode == 0
    before = bearers(loaded)
    f = tmp_path / "dup.txt"
    f.write_text(f"1 10.45.1.1 192.0.2.1 1\n2 10.45.1.2 192.0.2.1 2\n{line}\n")
    cp = pgwu(loaded, "session", "load", str(f), check=False)
    assert cp.returncode == 1
    assert f"{f}:3: {msg}" in cp.stderr
    assert bearers(loaded) == before


def test_session_load_over_capacity(pin_dir, tmp_path):
    ok(pin_dir, "load", "--max-bearers", "4")
    assert add(pin_dir, 1000, "10.45.9.1").returncode == 0
    f = tmp_path / "four.txt"
    f.write_text("".join(f"{i} 10.45.1.{i} 192.0.2.1 {i}\n" for i in range(1, 5)))
    cp = pgwu(pin_dir, "session", "load", str(f), check=False)
    assert cp.returncode == 1
    assert "bearer table full (capacity 4)" in cp.stderr
    assert [b["teid"] for b in bearers(pin_dir)] == [1000]


def test_session_load_failure_midway_is_undone(loaded, tmp_path):
    """A failure after every check passed (injected into the downlink insert of line 20, while the
    uplink table is being filled concurrently) removes every entry the call inserted, in both tables."""
    assert add(loaded, 1000, "10.45.9.1").returncode == 0
    before = bearers(loaded)
    f = tmp_path / "fifty.txt"
    f.write_text("".join(f"{i} 10.45.1.{i} 192.0.2.1 {i}\n" for i in range(1, 51)))
    cp = pgwu(loaded, "session", "load", str(f), env=dict(os.environ, PGWU_TEST_FAIL_DL_INSERT_AT="20"), check=False)
    assert cp.returncode == 1
    assert f"Couldn't insert the bearer of {f}:20 (TEID 20)" in cp.stderr
    assert "the tables are as they were" in cp.stderr
    assert bearers(loaded) == before
    with Dataplane(loaded) as dp:
        assert len(list(dp.maps["ul_bearers"].keys())) == 1
        assert len(list(dp.maps["dl_bearers"].keys())) == 1
    # and without the fault the same file loads
    ok(loaded, "session", "load", str(f))
    assert len(bearers(loaded)) == 51


def _load_rows(pin_dir: str) -> list[tuple]:
    return [(b["teid"], b["ue"], b["sgw"], b["sgw_teid"], b["csum"]) for b in bearers(pin_dir)]


GOOD_ROWS = [(1, "10.45.0.1", "192.0.2.1", 100, "default"), (2, "10.45.0.2", "192.0.2.2", 0x200, "on"),
             (3, "10.45.0.3", "192.0.2.3", 300, "off"), (4, "10.45.0.4", "192.0.2.4", 400, "default")]


def test_session_load_from_stdin_pipe(loaded):
    """`-` and /dev/stdin on a pipe (st_size 0): read to EOF, not 'loaded 0'."""
    cp = subprocess.run([PGWU, "-d", loaded, "session", "load", "-"], input=GOOD_FILE,
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0 and "loaded 4 bearers from <stdin>" in cp.stdout, cp
    assert _load_rows(loaded) == GOOD_ROWS
    ok(loaded, "session", "flush")
    cp = subprocess.run(f"cat | {PGWU} -d {loaded} session load /dev/stdin", shell=True,
                        input=GOOD_FILE, capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0 and "loaded 4 bearers from /dev/stdin" in cp.stdout, cp
    assert _load_rows(loaded) == GOOD_ROWS
    # unload reads its file the same way
    cp = subprocess.run([PGWU, "-d", loaded, "session", "unload", "-"], input=GOOD_FILE,
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0 and "deleted 4 bearers of <stdin>" in cp.stdout, cp
    assert bearers(loaded) == []


def test_session_load_from_fifo_in_pieces(loaded, tmp_path):
    """A FIFO whose writer sends the file in pieces with pauses: everything up to EOF is loaded."""
    fifo = tmp_path / "bearers.fifo"
    os.mkfifo(fifo)
    proc = subprocess.Popen([PGWU, "-d", str(loaded), "session", "load", str(fifo)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with open(fifo, "w") as w:
            for i, line in enumerate(GOOD_FILE.splitlines(keepends=True)):
                w.write(line)
                w.flush()
                time.sleep(0.05)
            # a big tail, larger than a pipe buffer, so reads are partial
            w.write("".join(f"{i} 10.46.{i >> 8}.{i & 255} 192.0.2.9 {i}\n" for i in range(100, 160)))
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and f"loaded 64 bearers from {fifo}" in out, err
    assert len(bearers(loaded)) == 64


@pytest.mark.timing
def test_session_load_reads_a_slow_pipe_without_holding_the_lock(loaded, record_property):
    """While `session load -` waits for its producer, other writers (which take the PIN_DIR lock)
    are not held up; the load then installs what came, all of it."""
    proc = subprocess.Popen([PGWU, "-d", loaded, "session", "load", "-"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        proc.stdin.write(GOOD_FILE[:40])  # part of the first lines, then a pause
        proc.stdin.flush()
        time.sleep(0.3)
        t0 = time.monotonic()
        cp = add(loaded, 1000, "10.45.9.1", timeout=10)
        took = time.monotonic() - t0
        record_property("add_s", round(took, 3))
        # held up, the add waits for the producer, which waits for it: its 10 s timeout. Not held
        # up: 0.01 s here (2026-11-28), the bound 5 s
        assert cp.returncode == 0 and took < 5, (took, cp.stderr)
        out, err = proc.communicate(GOOD_FILE[40:], timeout=30)  # the rest, then EOF
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and "loaded 4 bearers from <stdin>" in out, err
    assert [b["teid"] for b in bearers(loaded)] == [1, 2, 3, 4, 1000]


def test_session_load_stdin_bad_line_loads_nothing(loaded):
    assert add(loaded, 1000, "10.45.9.1").returncode == 0
    before = bearers(loaded)
    text = "1 10.45.1.1 192.0.2.1 1\n2 224.0.0.1 192.0.2.1 2\n"
    cp = subprocess.run([PGWU, "-d", loaded, "session", "load", "-"], input=text,
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 1
    assert "<stdin>:2: UE address '224.0.0.1' is a multicast address" in cp.stderr, cp.stderr
    assert "<stdin>: nothing loaded" in cp.stderr
    assert bearers(loaded) == before


def test_session_load_of_an_endless_stream_of_good_lines_stops_at_the_tables_capacity(loaded):
    """Valid, distinct-looking lines without end (`yes`): read up to the loaded table's capacity (64
    here), then one line naming it, exit 2, nothing loaded, the table as it was. Bounded by the
    largest table any PGW-U can have, this grew to 3.6 GB in 15 s."""
    before = bearers(loaded)
    yes = subprocess.Popen(["yes", "10 10.45.1.1 192.0.2.1 20"], stdout=subprocess.PIPE)
    try:
        cp = subprocess.run([PGWU, "-d", loaded, "session", "load", "-"], stdin=yes.stdout,
                            capture_output=True, text=True, timeout=60)
    finally:
        yes.kill()
        yes.wait()
    assert cp.returncode == 2, cp.stderr
    assert cp.stderr.splitlines() == ["<stdin>:65: more than 64 bearers: more than the bearer table holds (its capacity)",
                                      "<stdin>: nothing loaded"], cp.stderr
    assert bearers(loaded) == before


def test_session_load_unreadable(loaded, tmp_path):
    missing = tmp_path / "missing.txt"
    cp = pgwu(loaded, "session", "load", str(missing), check=False)
    assert cp.returncode == 1 and f"Couldn't read {missing}: No such file or directory" in cp.stderr
    cp = pgwu(loaded, "session", "load", str(tmp_path), check=False)
    assert cp.returncode == 1 and f"Couldn't read {tmp_path}: Is a directory" in cp.stderr
    cp = pgwu(loaded, "session", "load", check=False)
    assert cp.returncode == 2 and "Missing argument FILE" in cp.stderr
    assert bearers(loaded) == []


# ---- attach -------------------------------------------------------------------------------------

def test_attach_missing_interface_attaches_nothing(pin_dir):
    name = f"gtnone{secrets.token_hex(3)}"
    # not loaded yet: the failed attach must not leave a loaded PIN_DIR behind either
    cp = pgwu(pin_dir, "attach", "--access", name, "--sgi", "lo", check=False)
    assert cp.returncode == 1 and f"No interface {name} (--access)" in cp.stderr
    assert not os.path.exists(pin_dir)
    ok(pin_dir, "load")
    cp = pgwu(pin_dir, "attach", "--access", "lo", "--sgi", name, check=False)
    assert cp.returncode == 1 and f"No interface {name} (--sgi)" in cp.stderr
    assert not [n for n in os.listdir(pin_dir) if n.startswith(LINK_PREFIX)]
    cp = pgwu(pin_dir, "attach", "--access", "lo", "--sgi", "lo", check=False)
    assert cp.returncode == 2 and "lo is given twice" in cp.stderr
    cp = pgwu(pin_dir, "detach", check=False)
    assert cp.returncode == 1 and "not attached" in cp.stderr


# ---- config -------------------------------------------------------------------------------------

def test_local_addr6_load_and_config(pin_dir):
    """--local-addr6 (the N6 address ICMPv6 errors come from): set at load, shown, changed by config,
    cleared with ::, each time in the config map's local_addr6."""
    ok(pin_dir, "load", "--max-bearers", "64", "--local-addr", "192.0.2.10", "--local-addr6", "fd47:7472::1")
    assert json.loads(ok(pin_dir, "config", "--json"))["local_addr6"] == "fd47:7472::1"
    with Dataplane(pin_dir) as dp:
        assert dp.get_config().local_addr6 == "fd47:7472::1"
    assert "fd47:7472::1" in ok(pin_dir, "config")
    for a6 in ("2001:db8::7", "::"):
        assert json.loads(ok(pin_dir, "config", "--json", "--local-addr6", a6))["local_addr6"] == a6
        with Dataplane(pin_dir) as dp:
            assert dp.get_config().local_addr6 == a6


def test_config_set_and_show(loaded):
    lo_index = socket_if_index("lo")
    shown = json.loads(ok(loaded, "config", "--json", "--local-addr", "203.0.113.5", "--ue-pool", "10.0.0.0/8",
                          "--csum", "off", "--vlan", "sgi", "100", "--vlan", "access", "4094",
                          "--nexthop", "access", "lo", "02:00:00:00:00:01"))
    assert shown["local_addr"] == "203.0.113.5" and shown["ue_pool"] == "10.0.0.0/8"
    assert shown["csum"] == "off" and shown["vlan"] == {"access": 4094, "sgi": 100}
    assert shown["nexthop"]["access"] == {"ifindex": lo_index, "ifname": "lo", "smac": "00:00:00:00:00:00",
                                          "dmac": "02:00:00:00:00:01"}
    assert shown["nexthop"]["sgi"] == "fib"
    assert json.loads(ok(loaded, "config", "--json")) == shown
    with Dataplane(loaded) as dp:
        cfg = dp.get_config()
    assert (cfg.local_addr, cfg.ue_pool, cfg.csum, cfg.egress_vlan) == ("203.0.113.5", "10.0.0.0/8", False,
                                                                       (4094, 100))
    assert (cfg.nexthop[0].ifindex, cfg.nexthop[0].dmac) == (lo_index, "02:00:00:00:00:01")

    human = ok(loaded, "config", "--nexthop", "access", "fib", "--vlan", "access", "0")
    assert re.search(r"^next hop access\s+fib$", human, re.M)
    assert re.search(r"^VLAN access\s+none$", human, re.M)
    assert re.search(r"^VLAN sgi\s+100$", human, re.M)
    with Dataplane(loaded) as dp:
        assert dp.get_config().nexthop[0].ifindex == 0


@pytest.mark.parametrize("args,msg", [
    (["--vlan", "sgi", "4095"], "Invalid --vlan"),
    (["--vlan", "core", "5"], "SIDE must be access or sgi"),
    (["--ue-pool", "10.0.0.1/8"], "Invalid --ue-pool"),
    (["--nexthop", "access", "lo", "02:00:00:00:00"], "Invalid --nexthop"),
    (["--nexthop", "access"], "SIDE IFNAME DSTMAC or SIDE fib"),
    (["--local-addr", "1.2.3.4.5"], "Invalid --local-addr"),
])
def test_config_bad_input_changes_nothing(loaded, args, msg):
    before = ok(loaded, "config", "--json")
    cp = pgwu(loaded, "config", *args, check=False)
    assert cp.returncode == 2 and msg in cp.stderr
    assert ok(loaded, "config", "--json") == before


def test_config_nexthop_missing_interface(loaded):
    before = ok(loaded, "config", "--json")
    cp = pgwu(loaded, "config", "--nexthop", "sgi", "gtnone0", "02:00:00:00:00:01", "--csum", "off", check=False)
    assert cp.returncode == 1 and "No interface gtnone0" in cp.stderr
    assert ok(loaded, "config", "--json") == before


def socket_if_index(name: str) -> int:
    import socket
    return socket.if_nametoindex(name)


# ---- stats and metrics --------------------------------------------------------------------------

def set_counter(pin_dir: str, reason: str, verdict: str, per_cpu: list[tuple[int, int]]) -> None:
    """Write one stats slot straight into the per-CPU map (as the XDP programs would)."""
    with bpf.Map.pinned(f"{pin_dir}/stats") as m:
        vals = [struct.pack("=QQ", *per_cpu[i % len(per_cpu)]) if i < len(per_cpu) else bytes(16)
                for i in range(m.ncpus)]
        key = REASONS.index(reason) * len(VERDICTS) + VERDICTS.index(verdict)
        m.update(struct.pack("=I", key), vals)


def test_stats_json_has_every_reason(loaded):
    set_counter(loaded, "drop_unknown_teid", "drop", [(3, 300), (4, 400)])
    assert add(loaded, 1, "10.45.0.1").returncode == 0
    st = json.loads(ok(loaded, "stats", "--json"))
    assert list(st["reasons"]) == list(REASONS)
    for r in REASONS:
        assert list(st["reasons"][r]) == list(VERDICTS)
    ncpus = bpf.possible_cpus()
    want = (3 + (4 if ncpus > 1 else 0), 300 + (400 if ncpus > 1 else 0))
    assert (st["reasons"]["drop_unknown_teid"]["drop"]["packets"],
            st["reasons"]["drop_unknown_teid"]["drop"]["bytes"]) == want
    assert st["verdicts"]["drop"] == {"packets": want[0], "bytes": want[1]}
    assert st["bearers"]["uplink"] == 1 and st["bearers"]["downlink"] == 1 and st["bearers"]["capacity"] == 64

    human = ok(loaded, "stats")
    rows = re.findall(r"^([a-z_0-9]+)\s+(aborted|drop|pass|tx|redirect)\s+(\d+)\s+(\d+)$", human, re.M)
    assert rows == [("drop_unknown_teid", "drop", str(want[0]), str(want[1]))]  # non-zero rows only
    assert "bearers: 1 uplink, 1 downlink, capacity 64" in human


class Exporter:
    def __init__(self, pin_dir: str):
        self.proc = subprocess.Popen([PGWU, "-d", pin_dir, "metrics", "--listen", "127.0.0.1:0"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)/metrics", line)
        if not m:
            self.proc.kill()
            raise AssertionError(f"exporter did not start: {line!r} {self.proc.stderr.read()}")
        self.url = f"http://127.0.0.1:{m.group(1)}"

    def get(self, path: str = "/metrics") -> tuple[int, str, str]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as r:
                return r.status, r.headers.get("Content-Type"), r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Content-Type"), e.read().decode()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise


def test_metrics_endpoint(loaded):
    set_counter(loaded, "ul_fwd", "redirect", [(5, 500)])
    assert add(loaded, 1, "10.45.0.1").returncode == 0
    with Dataplane(loaded) as dp:
        dl = dp.maps["dl_bearers"].lookup(bytes([10, 45, 0, 1]))
        dp.maps["dl_bearers"].update(bytes([10, 45, 0, 1]), dl[:16] + struct.pack("=QQ", 2, 84))
    exp = Exporter(loaded)
    try:
        status, ctype, text = exp.get()
        assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
        lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        assert lint.returncode == 0 and not lint.stdout.strip() and not lint.stderr.strip(), lint
        assert 'pgwu_packets_total{reason="ul_fwd",verdict="redirect"} 5\n' in text
        assert 'pgwu_bytes_total{reason="ul_fwd",verdict="redirect"} 500\n' in text
        assert 'pgwu_bearers{table="uplink"} 1\n' in text
        assert "pgwu_bearer_capacity 64\n" in text
        assert 'pgwu_bearer_usage_bytes_total{direction="downlink"} 84\n' in text
        for r in REASONS:
            assert f'pgwu_packets_total{{reason="{r}",verdict="drop"}}' in text
        # stateless: a counter changed between scrapes shows on the next one
        set_counter(loaded, "ul_fwd", "redirect", [(6, 600)])
        assert 'pgwu_packets_total{reason="ul_fwd",verdict="redirect"} 6\n' in exp.get()[2]
        # the route cache counts as in use only with a registered watcher
        assert "pgwu_fib_cache_in_use 0\n" in text
        with Dataplane(loaded) as dp:
            dp.set_config(fib_cache=True)
            dp.maps["fib_gen"].update(struct.pack("=I", 1), struct.pack("=Q", os.getpid()))
        assert "pgwu_fib_cache_in_use 1\n" in exp.get()[2]
        assert exp.get("/")[0] == 404
        assert exp.get("/metricsfoo")[0] == 404
    finally:
        rc = exp.stop()
    assert rc == 0


def _idle_connections(url: str, n: int, partial: bytes = b"") -> list:
    import socket
    host, port = url.removeprefix("http://").split(":")
    socks = []
    for _ in range(n):
        s = socket.create_connection((host, int(port)), timeout=5)
        if partial:
            s.sendall(partial)
        socks.append(s)
    return socks


def _timed_scrape(exp: "Exporter") -> float:
    t0 = time.monotonic()
    with urllib.request.urlopen(exp.url + "/metrics", timeout=1) as r:
        assert r.status == 200 and "pgwu_bearer_capacity 64" in r.read().decode()
    return time.monotonic() - t0


@pytest.mark.parametrize("n,partial", [(50, b""), (50, b"GET /metr"), (300, b"")],
                         ids=["50 idle", "50 half-sent requests", "300 idle (over the 128 served)"])
@pytest.mark.timing
def test_metrics_slow_clients_cannot_blind_a_scraper(loaded, n, partial, record_property):
    """Half-open connections used to hold the one-at-a-time server 5 s each (50 of them: /metrics
    unreachable for minutes). Now a scrape made after them answers within 1 s."""
    exp = Exporter(loaded)
    socks = []
    try:
        socks = _idle_connections(exp.url, n, partial)
        time.sleep(0.2)  # let the server accept them all first
        took = _timed_scrape(exp)
        record_property("scrape_s", round(took, 3))
        # blinded, a scrape waits 5 s per connection ahead of it; not blinded: 2-7 ms here (2026-11-28),
        # the bound over 100 x that
        assert took < 1.0, f"the scrape took {took:.2f} s"
        # and each slow connection is closed by the server at its deadline (5 s), not kept forever:
        # 5 s after it was accepted, so at most 5 s from now (4.8 s here); 2 s of headroom
        t0 = time.monotonic()
        socks[0].settimeout(10)
        assert socks[0].recv(100) == b""
        closed = time.monotonic() - t0
        record_property("closed_after_s", round(closed, 3))
        assert closed < 7, f"closed {closed:.2f} s later"
    finally:
        for s in socks:
            s.close()
        rc = exp.stop()
    assert rc == 0


def test_metrics_answers_a_request_sent_in_pieces(loaded):
    """Non-blocking reads assemble a request that arrives a few bytes at a time (within 5 s)."""
    exp = Exporter(loaded)
    try:
        (s,) = _idle_connections(exp.url, 1)
        for piece in (b"GET /met", b"rics HTTP/1.0\r\n", b"Host: x\r\n", b"\r\n"):
            s.sendall(piece)
            time.sleep(0.2)
        s.settimeout(5)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        s.close()
        assert data.startswith(b"HTTP/1.0 200 OK") and b"pgwu_bearer_capacity 64" in data
    finally:
        rc = exp.stop()
    assert rc == 0


def test_metrics_refuses_when_not_loaded_and_bad_listen(pin_dir):
    cp = pgwu(pin_dir, "metrics", "--listen", "127.0.0.1:0", timeout=10, check=False)
    assert cp.returncode == 1 and "not loaded" in cp.stderr
    cp = pgwu(pin_dir, "metrics", "--listen", "localhost", timeout=10, check=False)
    assert cp.returncode == 2 and "Invalid --listen" in cp.stderr


# ---- lab: attach to real interfaces in a namespace ----------------------------------------------

@pytest.fixture
def netns():
    """A namespace with a veth pair pa<id> <-> pb<id> (both ends inside), always deleted."""
    ident = secrets.token_hex(3)
    ns = f"gtplab-pgwu-{ident}"
    a, b = f"pa{ident}", f"pb{ident}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "add", a, "type", "veth", "peer", "name", b], check=True)
        for ifname in (a, b):
            subprocess.run(["ip", "-n", ns, "link", "set", ifname, "up"], check=True)
        yield ns, a, b
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def xdp_prog_id(ns: str, ifname: str) -> int | None:
    out = subprocess.run(["ip", "-n", ns, "-j", "-d", "link", "show", ifname], capture_output=True,
                         text=True, check=True).stdout
    xdp = json.loads(out)[0].get("xdp")
    if not xdp:
        return None
    return xdp.get("prog", {}).get("id") or (xdp.get("attached") or [{}])[0].get("prog", {}).get("id")


@pytest.mark.lab
@pytest.mark.parametrize("mode", ["native", "generic"])
def test_attach_detach_in_namespace(pin_dir, netns, mode):
    ns, a, b = netns
    ok(pin_dir, "load")
    with bpf.Prog.pinned(f"{pin_dir}/xdp_access") as p:
        access_id = p.info().id
    with bpf.Prog.pinned(f"{pin_dir}/xdp_sgi") as p:
        sgi_id = p.info().id
    ok(pin_dir, "--netns", ns, "attach", "--access", a, "--sgi", b, "--mode", mode)
    assert (xdp_prog_id(ns, a), xdp_prog_id(ns, b)) == (access_id, sgi_id)
    # the kernel takes what xdp_sgi passes it (our own address as source) only with accept_local
    accept = {i: subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-n", f"net.ipv4.conf.{i}.accept_local"],
                                capture_output=True, text=True, check=True).stdout.strip() for i in (a, b)}
    assert accept == {a: "0", b: "1"}
    assert sorted(n for n in os.listdir(pin_dir) if n.startswith(LINK_PREFIX)) == sorted(
        [LINK_PREFIX + a, LINK_PREFIX + b])
    shown = json.loads(ok(pin_dir, "config", "--json"))
    assert sorted(shown["attached"]) == sorted([a, b])
    cp = pgwu(pin_dir, "--netns", ns, "attach", "--access", a, "--sgi", b, check=False)
    assert cp.returncode == 1 and "already attached" in cp.stderr

    # detach works from any namespace: the links are pinned objects, not per-netns state
    ok(pin_dir, "detach")
    assert (xdp_prog_id(ns, a), xdp_prog_id(ns, b)) == (None, None)
    assert not [n for n in os.listdir(pin_dir) if n.startswith(LINK_PREFIX)]


@pytest.mark.lab
def test_attach_loads_when_needed_and_unload_detaches(pin_dir, netns):
    ns, a, b = netns
    # nsenter keeps our mount namespace (and so /sys/fs/bpf), unlike `ip netns exec`
    cp = subprocess.run(["nsenter", f"--net=/run/netns/{ns}", PGWU, "-d", pin_dir, "attach", "--access", a,
                         "--sgi", b], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    assert os.path.exists(f"{pin_dir}/config")
    assert xdp_prog_id(ns, a) is not None and xdp_prog_id(ns, b) is not None
    ok(pin_dir, "unload")
    assert not os.path.exists(pin_dir)
    assert (xdp_prog_id(ns, a), xdp_prog_id(ns, b)) == (None, None)


@pytest.mark.lab
def test_ip_netns_exec_explains_the_missing_bpffs(pin_dir, netns):
    ns, a, b = netns
    ok(pin_dir, "load")
    cp = subprocess.run(["ip", "netns", "exec", ns, PGWU, "-d", pin_dir, "stats"], capture_output=True,
                        text=True, timeout=60)
    assert cp.returncode == 1
    assert "not loaded" in cp.stderr and "pgwu --netns NS" in cp.stderr


# ---- long: a million bearers --------------------------------------------------------------------

def million_file(path: Path, n: int = 1_000_000) -> list[tuple[int, str, str, int, str]]:
    """n distinct bearers, written fast: TEIDs 1..n, UEs 10.x.y.z, varied SGWs and checksum options."""
    rows = []
    csum = ("default", "on", "off")
    for i in range(1, n + 1):
        ue = f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}"
        rows.append((i, ue, f"192.0.2.{1 + i % 250}", 0x10000 + i, csum[i % 3]))
    with open(path, "w") as f:
        f.write("".join(f"{t} {u} {s} {st} csum={c}\n" if c != "default" else f"{t} {u} {s} {st}\n"
                        for t, u, s, st, c in rows))
    return rows


@pytest.mark.long
def test_bulk_load_a_million(pin_dir, tmp_path):
    ok(pin_dir, "load")
    f = tmp_path / "million.txt"
    t0 = time.monotonic()
    rows = million_file(f)
    t_gen = time.monotonic() - t0

    t0 = time.monotonic()
    out = ok(pin_dir, "session", "load", str(f), timeout=600)
    t_load = time.monotonic() - t0
    assert "loaded 1000000 bearers" in out

    t0 = time.monotonic()
    listing = ok(pin_dir, "session", "list", timeout=600)
    t_list = time.monotonic() - t0
    lines = listing.splitlines()
    assert lines[0].split()[:5] == ["TEID", "UE", "SGW", "SGW_TEID", "CSUM"]
    got = [tuple(line.split()[:5]) for line in lines[1:]]
    want = [(str(t), u, s, str(st), c) for t, u, s, st, c in rows]
    assert len(got) == len(want)
    assert got == want  # list is sorted by TEID, as the file is
    st = json.loads(ok(pin_dir, "stats", "--json", timeout=600))
    assert st["bearers"]["uplink"] == st["bearers"]["downlink"] == 1_000_000
    print(f"\n1M bearers: file generated in {t_gen:.2f} s, session load {t_load:.2f} s, "
          f"session list {t_list:.2f} s")


def test_config_reply_and_inner_checksum_switches(loaded):
    """--err-ind and --inner-csum-check reach the config map's flags (both on by default) and show."""
    with Dataplane(loaded) as dp:
        c = dp.get_config()
        assert (c.err_ind, c.inner_csum_check) == (True, True)
        shown = json.loads(ok(loaded, "config", "--json"))
        assert (shown["err_ind"], shown["inner_csum_check"]) == ("on", "on")
        shown = json.loads(ok(loaded, "config", "--err-ind", "off", "--inner-csum-check", "off", "--json"))
        assert (shown["err_ind"], shown["inner_csum_check"]) == ("off", "off")
        c = dp.get_config()
        assert (c.err_ind, c.inner_csum_check, c.local_addr) == (False, False, "192.0.2.10")
        ok(loaded, "config", "--inner-csum-check", "on")
        assert (dp.get_config().err_ind, dp.get_config().inner_csum_check) == (False, True)
        assert json.loads(ok(loaded, "config", "--json"))["sport_entropy"] == "on"
        assert json.loads(ok(loaded, "config", "--sport-entropy", "off", "--json"))["sport_entropy"] == "off"
        assert not dp.get_config().sport_entropy and not dp.get_config().err_ind
    cp = pgwu(loaded, "config", "--err-ind", "maybe", check=False)
    assert cp.returncode == 2


def test_sport_entropy_on_by_default_and_switchable(pin_dir):
    """TS 29.281 4.4.2.0: a freshly loaded pgwu sends each downlink G-PDU from the outer UDP source
    port of its inner flow (pgwu_sport_of: 49152-65535), shown on and exported as such;
    `config --sport-entropy off` (or `load --sport-entropy off`) gives 2152, and on goes back."""
    from gtplab.gtpu import packets as P
    ok(pin_dir, "load", "--max-bearers", "64", "--local-addr", "192.0.2.10", "--ue-pool", "10.45.0.0/16")
    ok(pin_dir, "config", "--nexthop", "access", "lo", "02:00:00:00:00:01")
    assert add(pin_dir, 1, "10.45.0.1").returncode == 0
    assert json.loads(ok(pin_dir, "config", "--json"))["sport_entropy"] == "on"
    assert re.search(r"^outer UDP sport\s+from the inner flow \(49152-65535\)$", ok(pin_dir, "config"), re.M)
    flows = [bytes(P.downlink_ip(ue="10.45.0.1", size=200, l4="udp", sport=10000 + i, dport=443))
             for i in range(16)]

    def sports() -> list[int]:
        with Dataplane(pin_dir) as dp:
            outs = [dp.run_sgi(f) for f in flows]
        assert all(o.verdict == "tx" for o in outs), [o.verdict for o in outs]
        return [struct.unpack("!H", o.data[34:36])[0] for o in outs]

    want = [O.sport_of_flow(O.ip_payload(f)) for f in flows]
    assert sports() == want and len(set(want)) > 8 and 2152 not in want
    assert json.loads(ok(pin_dir, "config", "--sport-entropy", "off", "--json"))["sport_entropy"] == "off"
    assert re.search(r"^outer UDP sport\s+2152 \(--sport-entropy off\)$", ok(pin_dir, "config"), re.M)
    assert sports() == [2152] * len(flows)
    exp = Exporter(pin_dir)
    try:
        assert 'sport_entropy="off"' in exp.get()[2]
        ok(pin_dir, "config", "--sport-entropy", "on")
        assert 'sport_entropy="on"' in exp.get()[2]
    finally:
        assert exp.stop() == 0
    assert sports() == want
    ok(pin_dir, "unload")
    ok(pin_dir, "load", "--max-bearers", "64", "--sport-entropy", "off")
    assert json.loads(ok(pin_dir, "config", "--json"))["sport_entropy"] == "off"
    with Dataplane(pin_dir) as dp:
        assert dp.get_config().sport_entropy is False
    assert pgwu(pin_dir, "config", "--sport-entropy", "2152", check=False).returncode == 2


@pytest.mark.long
@pytest.mark.timing
def test_bulk_load_a_million_from_a_pipe(pin_dir, tmp_path):
    """The same million through a pipe (`cat FILE | pgwu session load -`): all of it, in <= 5 s."""
    ok(pin_dir, "load")
    f = tmp_path / "million.txt"
    million_file(f)
    t0 = time.monotonic()
    cp = subprocess.run(f"cat {f} | {PGWU} -d {pin_dir} session load -", shell=True,
                        capture_output=True, text=True, timeout=600)
    t_load = time.monotonic() - t0
    assert cp.returncode == 0 and "loaded 1000000 bearers from <stdin>" in cp.stdout, cp.stderr
    st = json.loads(ok(pin_dir, "stats", "--json", timeout=600))
    assert st["bearers"]["uplink"] == st["bearers"]["downlink"] == 1_000_000
    print(f"\n1M bearers through a pipe: session load {t_load:.2f} s")
    assert t_load <= 5.0


# ---- pgwu reassemble ------------------------------------------------------------------------------

def reasm_slot(pin_dir: str) -> int:
    """fib_gen[3] (PGWU_REG_REASM): the tgid of the registered `pgwu reassemble`, 0: none."""
    with bpf.Map.pinned(f"{pin_dir}/fib_gen") as m:
        return struct.unpack("=Q", m.lookup(struct.pack("=I", 3)))[0]


def test_reassembler_counters_in_stats_and_metrics(loaded):
    names = ["received", "forwarded", "drop_not_access"]
    with bpf.Map.pinned(f"{loaded}/reasm_stats") as m:
        for k, v in ((0, 7), (1, 5), (14, 2)):          # received, forwarded, drop_spoofed
            m.update(struct.pack("=I", k), struct.pack("=Q", v))
    js = json.loads(ok(loaded, "stats", "--json"))["reassembler"]
    assert (js["pid"], js["received"], js["forwarded"], js["drop_spoofed"], js["drop_not_access"]) == (0, 7, 5, 2, 0)
    assert list(js)[:4] == ["pid"] + names
    text = ok(loaded, "stats")
    assert "none (outer fragments are dropped)" in text and "drop_spoofed" in text
    assert "drop_unknown_teid" not in text      # drops shown when they happened
    with bpf.Map.pinned(f"{loaded}/fib_gen") as m:
        m.update(struct.pack("=I", 3), struct.pack("=Q", os.getpid()))
    assert f"pgwu reassemble pid {os.getpid()}" in ok(loaded, "stats")
    exp = Exporter(loaded)
    try:
        status, _, text = exp.get()
        assert status == 200
        lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        assert lint.returncode == 0 and not lint.stdout.strip() and not lint.stderr.strip(), lint
        assert "pgwu_reassembler_running 1\n" in text
        assert "pgwu_reassembler_received_total 7\n" in text
        assert 'pgwu_reassembler_datagrams_total{result="forwarded"} 5\n' in text
        assert 'pgwu_reassembler_datagrams_total{result="drop_spoofed"} 2\n' in text
        assert 'pgwu_reassembler_datagrams_total{result="drop_send"} 0\n' in text
    finally:
        assert exp.stop() == 0


def test_reassemble_registers_and_the_kernel_unregisters_it(pin_dir, netns):
    ns, a, _ = netns
    cp = pgwu(pin_dir, "--netns", ns, "reassemble", check=False)
    assert cp.returncode == 1 and "not loaded" in cp.stderr
    ok(pin_dir, "load", "--max-bearers", "64")
    cp = pgwu(pin_dir, "--netns", ns, "reassemble", "--daemon", check=False)
    assert cp.returncode == 1 and "no GTP-U address" in cp.stderr, cp
    assert reasm_slot(pin_dir) == 0
    ok(pin_dir, "config", "--local-addr", "10.77.0.1")
    subprocess.run(["ip", "-n", ns, "addr", "add", "10.77.0.1/24", "dev", a], check=True)
    out = ok(pin_dir, "--netns", ns, "reassemble", "--daemon")
    pid = int(re.search(r"running as pid (\d+)", out).group(1))
    try:
        assert reasm_slot(pin_dir) == pid            # registered before --daemon returned
        cp = pgwu(pin_dir, "--netns", ns, "reassemble", check=False)
        assert cp.returncode == 1 and f"already runs for {pin_dir} (pid {pid})" in cp.stderr
        assert reasm_slot(pin_dir) == pid
    finally:
        os.kill(pid, signal.SIGKILL)                # however it dies, the kernel unregisters it
    deadline = time.monotonic() + 5
    while reasm_slot(pin_dir) != 0:
        assert time.monotonic() < deadline, "registration left after the reassembler was killed"
        time.sleep(0.05)
    # foreground: SIGTERM ends it cleanly (exit 0), unregistered
    p = subprocess.Popen([PGWU, "-d", pin_dir, "--netns", ns, "reassemble"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert "registered as pid" in line, (line, p.stderr.read() if p.poll() is not None else "")
        assert reasm_slot(pin_dir) == p.pid
    finally:
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=10)
    assert rc == 0 and reasm_slot(pin_dir) == 0


# ---- IPv6 inside the tunnel: a bearer's UE /64 (--ue6, ue6=) -------------------------------------

def _v6_maps(pin_dir: str) -> tuple[dict, dict]:
    """(ul6_prefix {TEID: prefix bytes}, dl6_bearers {prefix bytes: local TEID}) as pinned."""
    with bpf.Map.pinned(f"{pin_dir}/ul6_prefix") as u, bpf.Map.pinned(f"{pin_dir}/dl6_bearers") as d:
        ul = {struct.unpack("!I", k)[0]: u.lookup(k)[:8] for k in u.keys()}   # struct pgwu_ul6: prefix first
        dl = {k: struct.unpack_from("!I", d.lookup(k), 8)[0] for k in d.keys()}
    return ul, dl


def _p64(s: str) -> bytes:
    return socket.inet_pton(socket.AF_INET6, s)[:8]


def test_session_ue6_add_show_del(loaded):
    """--ue6 writes the /64 for uplink anti-spoofing (ul6_prefix[TEID]) and the IPv6 downlink half
    (dl6_bearers[/64], the IPv4 half's value); list/get show it; del removes both."""
    cp = add(loaded, 1, "10.45.0.1", "192.0.2.1", 5, "--ue6", "fd47:7470:0:1::/64")
    assert cp.returncode == 0 and "UE6 fd47:7470:0:1::/64" in cp.stdout
    assert add(loaded, 2, "10.45.0.2", "192.0.2.1", 6).returncode == 0
    ul, dl = _v6_maps(loaded)
    assert ul == {1: _p64("fd47:7470:0:1::")} and dl == {_p64("fd47:7470:0:1::"): 1}
    with bpf.Map.pinned(f"{loaded}/dl6_bearers") as d6, bpf.Map.pinned(f"{loaded}/dl_bearers") as d4:
        assert d6.lookup(_p64("fd47:7470:0:1::")) == d4.lookup(bytes([10, 45, 0, 1]))
    assert [(b["teid"], b.get("ue6")) for b in bearers(loaded)] == [(1, "fd47:7470:0:1::/64"), (2, None)]
    got = json.loads(ok(loaded, "session", "get", "--teid", "1", "--json"))
    assert (got["uplink6"], got["downlink6"]) == ({"packets": 0, "bytes": 0}, {"packets": 0, "bytes": 0})
    assert re.search(r"^1\s.*\s0\s+ue6=fd47:7470:0:1::/64$", ok(loaded, "session", "list"), re.M)
    ok(loaded, "session", "del", "--teid", "1")
    assert _v6_maps(loaded) == ({}, {})


def _slots6(pin_dir: str, teid: int, pfx: str) -> tuple[int | None, bytes | None]:
    """What the IPv6 slot index holds where teid and the /64 pfx go (pgwu.h: ul_slots' second entry,
    dl6_slots[octets 4-7 of the /64]): (its TEID, its /64), None for an empty entry."""
    with bpf.Map.pinned(f"{pin_dir}/ul_slots") as u, bpf.Map.pinned(f"{pin_dir}/dl6_slots") as d:
        line = u.lookup(struct.pack("=I", teid & (u.max_entries - 1)))
        (t6,), (st6,) = struct.unpack_from("!I", line, 32), struct.unpack_from("=I", line, 36)
        n = struct.unpack("!I", _p64(pfx)[4:])[0] & (d.max_entries - 1)
        p6, st = struct.unpack_from("=8sI", d.lookup(struct.pack("=I", n)))
    return (t6 if st6 == 1 else None), (p6 if st == 1 else None)


def test_session_commands_keep_the_ipv6_slot_index_right(loaded, tmp_path):
    """The /64s' slot index (ul_slots' IPv6 entry, dl6_slots) kept in step with ul6_prefix and
    dl6_bearers by every pgwu writer: with 64 slots, TEID 65 and fd47:7470:0:41::/64 share bearer 1's
    slots and stay in the hash maps. Both forward both ways and are counted (slot + hash); after
    del, re-add without a /64 or with another one, unload and flush nothing stale is used: a stale
    uplink entry would take an IPv6 packet the TEID has no /64 for, a stale downlink one would
    forward to a deleted bearer."""
    from gtplab.gtpu import packets as P
    from gtplab.dut.dataplane import Dataplane
    ok(loaded, "config", "--nexthop", "access", "lo", "02:00:00:00:00:01")
    ok(loaded, "config", "--nexthop", "sgi", "lo", "02:00:00:00:00:02")
    ok(loaded, "config", "--err-ind", "off")
    pfx1, pfx65 = "fd47:7470:0:1::", "fd47:7470:0:41::"
    assert add(loaded, 1, "10.45.0.1", "192.0.2.1", 0x100, "--ue6", pfx1 + "/64").returncode == 0
    assert add(loaded, 65, "10.45.0.65", "192.0.2.1", 0x165, "--ue6", pfx65 + "/64").returncode == 0
    assert _slots6(loaded, 1, pfx1) == (1, _p64(pfx1))         # the first in the slots, 65 not
    with Dataplane(loaded) as dp:
        def fwd6(teid, pfx):
            up = dp.run_access(bytes(P.gpdu6(teid, pfx + "10", "fd47:7471::10", outer_dst="192.0.2.10", size=200)))
            down = dp.run_sgi(bytes(P.downlink_ip6(pfx + "10", "fd47:7471::10", size=200)))
            return up.verdict, down.verdict

        def reason():
            return [k for k, v in dp.stats().items() if v[0]]

        assert fwd6(1, pfx1) == fwd6(65, pfx65) == ("tx", "tx")
        got = {b["teid"]: b for b in bearers(loaded)}
        assert [(got[t]["uplink6"]["packets"], got[t]["downlink6"]["packets"]) for t in (1, 65)] == [(1, 1)] * 2
        one = json.loads(ok(loaded, "session", "get", "--teid", "1", "--json"))
        assert (one["uplink6"]["packets"], one["downlink6"]["packets"]) == (1, 1)
        ok(loaded, "session", "del", "--teid", "1")
        assert _slots6(loaded, 1, pfx1) == (None, None)
        assert fwd6(1, pfx1) == ("drop", "drop") and fwd6(65, pfx65) == ("tx", "tx")
        assert add(loaded, 1, "10.45.0.1").returncode == 0             # no /64 now
        dp.reset_stats()
        assert fwd6(1, pfx1) == ("drop", "drop")
        assert reason() == [("drop_inner_not_ipv4", "drop"), ("drop_unknown_ue", "drop")]
        ok(loaded, "session", "del", "--teid", "1")
        assert add(loaded, 1, "10.45.0.1", "192.0.2.1", 0x100, "--ue6", "fd47:7470:0:2::/64").returncode == 0
        dp.reset_stats()
        assert fwd6(1, pfx1) == ("drop", "drop")                       # the old /64: spoofed, unknown
        assert reason() == [("drop_spoofed", "drop"), ("drop_unknown_ue", "drop")]
        assert fwd6(1, "fd47:7470:0:2::") == ("tx", "tx")
        gone = tmp_path / "gone.txt"
        gone.write_text("65 10.45.0.65 192.0.2.1 0x165\n")
        ok(loaded, "session", "unload", str(gone))                    # 65 was in the hash maps only
        assert fwd6(65, pfx65) == ("drop", "drop")
        ok(loaded, "session", "flush")
        gone.write_text(f"65 10.45.0.65 192.0.2.1 0x165 ue6={pfx65}/64\n")
        ok(loaded, "session", "load", str(gone))                      # back, now in the free slots
        assert _slots6(loaded, 65, pfx65) == (65, _p64(pfx65))
        assert fwd6(65, pfx65) == ("tx", "tx")
        assert {b["teid"]: (b["uplink6"]["packets"], b["downlink6"]["packets"]) for b in bearers(loaded)} == {65: (1, 1)}
        ok(loaded, "session", "unload", str(gone))                    # and out of them
        assert _slots6(loaded, 65, pfx65) == (None, None)
        assert fwd6(65, pfx65) == ("drop", "drop")
        ok(loaded, "session", "load", str(gone))
        ok(loaded, "session", "flush")
        assert _slots6(loaded, 65, pfx65) == (None, None)
        assert fwd6(65, pfx65) == ("drop", "drop")


def test_the_ipv6_downlink_finds_the_64_in_its_slot_and_counts_there(loaded):
    """xdp_sgi6 finds a /64 through dl6_slots (its slot: octets 4-7 of the /64, read by the program
    as one shift and a byte swap of the key, slot6_of) and counts the packet there, not in the hash
    entry: a slot the program computes otherwise than pgwu fills it (pgwu_slot6_of) would still
    forward, through dl6_bearers, at a hash lookup's cost every packet."""
    from gtplab.gtpu import packets as P
    from gtplab.dut.dataplane import Dataplane
    ok(loaded, "config", "--nexthop", "access", "lo", "02:00:00:00:00:01")
    ok(loaded, "config", "--nexthop", "sgi", "lo", "02:00:00:00:00:02")
    pfx = "fd47:7470:102:305::"             # slot 0x01020305 & 63 = 5; octets reversed would be 1
    assert add(loaded, 1, "10.45.0.1", "192.0.2.1", 0x100, "--ue6", pfx + "/64").returncode == 0
    assert _slots6(loaded, 1, pfx)[1] == _p64(pfx)
    with Dataplane(loaded) as dp:
        for _ in range(3):
            assert dp.run_sgi(bytes(P.downlink_ip6(pfx + "10", "fd47:7471::10", size=200))).verdict == "tx"
    with bpf.Map.pinned(f"{loaded}/dl6_slots") as d, bpf.Map.pinned(f"{loaded}/dl6_bearers") as h:
        in_slot = struct.unpack_from("=Q", d.lookup(struct.pack("=I", 0x01020305 & (d.max_entries - 1))), 32)[0]
        in_hash = struct.unpack_from("=Q", h.lookup(_p64(pfx)), 16)[0]
    assert (in_slot, in_hash) == (3, 0)


BAD_UE6 = [
    ("fd47:7470:0:2::/48", "not a /64"),
    ("fd47:7470:0:2::/128", "not a /64"),
    ("fd47:7470:0:2::", "no prefix length"),
    ("fd47:7470:0:2::1/64", "host bits set after the /64"),
    ("fd47:7470:0:zz::/64", "bad IPv6 prefix"),
    ("10.45.0.0/64", "bad IPv6 prefix"),
    ("ff02::/64", "not a unicast prefix"),
    ("fe80::/64", "not a unicast prefix"),
]


@pytest.mark.parametrize("ue6,msg", BAD_UE6, ids=[u for u, _ in BAD_UE6])
def test_session_add_bad_ue6_one_line_exit_2(loaded, ue6, msg):
    cp = add(loaded, 3, "10.45.0.3", "192.0.2.1", 5, "--ue6", ue6)
    assert cp.returncode == 2 and cp.stderr.count("\n") == 1 and msg in cp.stderr, cp.stderr
    assert bearers(loaded) == [] and _v6_maps(loaded) == ({}, {})


def test_session_add_ue6_in_use_changes_nothing(loaded):
    assert add(loaded, 1, "10.45.0.1", "192.0.2.1", 5, "--ue6", "fd47:7470:0:1::/64").returncode == 0
    before = bearers(loaded), _v6_maps(loaded)
    cp = add(loaded, 2, "10.45.0.2", "192.0.2.1", 5, "--ue6", "fd47:7470:0:1::/64")
    assert cp.returncode == 1 and "IPv6 prefix fd47:7470:0:1::/64 already has a bearer (TEID 1)" in cp.stderr
    assert (bearers(loaded), _v6_maps(loaded)) == before     # the IPv4 halves undone too


def test_session_load_ue6_and_flush(loaded, tmp_path):
    """ue6= as gtplab's bearer files write it (gtplab/pfcp/provision.py); unload and flush remove it."""
    f = tmp_path / "b.txt"
    f.write_text("1 10.45.0.1 192.0.2.1 100 ue6=fd47:7470:0:1::/64\n2 10.45.0.2 192.0.2.1 200\n"
                 "3 10.45.0.3 192.0.2.1 300 qfi=9 ue6=fd47:7470:0:3::/64 csum=on\n")
    assert "loaded 3 bearers" in ok(loaded, "session", "load", str(f))
    assert [(b["teid"], b.get("ue6")) for b in bearers(loaded)] == [
        (1, "fd47:7470:0:1::/64"), (2, None), (3, "fd47:7470:0:3::/64")]
    ok(loaded, "session", "unload", str(f))
    assert bearers(loaded) == [] and _v6_maps(loaded) == ({}, {})
    ok(loaded, "session", "load", str(f))
    assert "flushed 3 bearers" in ok(loaded, "session", "flush")
    assert _v6_maps(loaded) == ({}, {})


@pytest.mark.parametrize("lines,msg", [
    (["1 10.45.1.1 192.0.2.1 1 ue6=fd47:7470:0:1::/60"], ":1: bad ue6= 'fd47:7470:0:1::/60': not a /64"),
    (["1 10.45.1.1 192.0.2.1 1 ue6=fd47::/64 ue6=fd48::/64"], "a second ue6= option"),
    (["1 10.45.1.1 192.0.2.1 1 ue6=fd47::/64", "2 10.45.1.2 192.0.2.1 1 ue6=fd47::/64"],
     ":2: duplicate IPv6 prefix fd47::/64 (also on line 1)"),
    (["1 10.45.1.1 192.0.2.1 1 ue6=fd47:7470:0:9::/64"], ":1: IPv6 prefix fd47:7470:0:9::/64 already has a bearer"),
])
def test_session_load_bad_ue6_loads_nothing(loaded, tmp_path, lines, msg):
    assert add(loaded, 9, "10.45.0.9", "192.0.2.1", 5, "--ue6", "fd47:7470:0:9::/64").returncode == 0
    before = bearers(loaded), _v6_maps(loaded)
    f = tmp_path / "b.txt"
    f.write_text("\n".join(lines) + "\n")
    cp = pgwu(loaded, "session", "load", str(f), check=False)
    assert cp.returncode == 1 and msg in cp.stderr and "nothing loaded" in cp.stderr, cp.stderr
    assert (bearers(loaded), _v6_maps(loaded)) == before
