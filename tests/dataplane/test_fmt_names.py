"""The names `pgwu stats`, `pgwu metrics` and the lab read for the data plane's enums (the tables of
dataplane/pgwu_fmt.c) name every enumerator of pgwu.h and pgwu_sock.h, in its order: the
enumerator lower-cased without its prefix, none missing (a NULL would be printed as "(null)"), none
left over. The tables are built for this test with a small C program (tests/dataplane/c/fmt_names.c)
against pgwu_fmt.c; the enums are read from the headers' text."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.lib import REPO

DP = REPO / "dataplane"
# table -> (header, enum, enumerator prefix)
TABLES = {
    "pgwu_reason_names": ("pgwu.h", "pgwu_reason", "PGWU_R_"),
    "pgwu_event_names": ("pgwu.h", "pgwu_event", "PGWU_EV_"),
    "pgwu_reasm_names": ("pgwu.h", "pgwu_reasm_stat", "PGWU_RA_"),
    "pgwu_sock_reason_names": ("pgwu_sock.h", "pgwu_sock_reason", "PGWU_SR_"),
    "pgwu_sock_counter_names": ("pgwu_sock.h", "pgwu_sock_counter", "PGWU_SC_"),
}


def enumerators(header: str, enum: str, prefix: str) -> list[str]:
    """The enumerators of `enum NAME { ... }` in a header, in order, without the *_MAX one."""
    text = (DP / header).read_text()
    body = re.search(r"enum\s+" + enum + r"\s*\{(.*?)\};", text, re.S)
    assert body, f"enum {enum} not found in {header}"
    code = re.sub(r"/\*.*?\*/|//[^\n]*", "", body.group(1), flags=re.S)
    names = [e.split("=")[0].strip() for e in code.split(",") if e.strip()]
    names = [n for n in names if not n.endswith("_MAX")]
    assert names and all(n.startswith(prefix) for n in names), names
    return names


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, list[str]]:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    assert cc, "a C compiler is needed (setup.sh installs gcc and clang)"
    exe = tmp_path_factory.mktemp("fmt") / "fmt_names"
    subprocess.run([cc, "-O1", "-Wall", f"-I{DP}", f"-I{REPO / 'lib/include'}",
                    str(REPO / "tests/dataplane/c/fmt_names.c"), str(DP / "pgwu_fmt.c"), "-o", str(exe)],
                   check=True, capture_output=True, text=True, timeout=120)
    out: dict[str, list[str]] = {}
    for line in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines():
        table, index, name = line.split(" ", 2)
        assert int(index) == len(out.setdefault(table, []))
        out[table].append(name)
    return out


@pytest.mark.parametrize("table", sorted(TABLES))
def test_every_enumerator_has_its_name_in_order(table, tables):
    header, enum, prefix = TABLES[table]
    want = [n[len(prefix):].lower() for n in enumerators(header, enum, prefix)]
    assert tables[table] == want


def test_verdict_names_are_the_xdp_actions_in_their_order(tables):
    """PGWU_VERDICT_MAX counts XDP_ABORTED .. XDP_REDIRECT (linux/bpf.h's enum xdp_action)."""
    assert tables["pgwu_verdict_names"] == ["aborted", "drop", "pass", "tx", "redirect"]


def _bearer_flags() -> dict[str, int]:
    """pgwu.h's one-bit bearer-half flags: {name without PGWU_B_: bit}."""
    text = (DP / "pgwu.h").read_text()
    return {m[1]: int(m[2]) for m in re.finditer(r"^#define PGWU_B_(\w+)\s+\(1U << (\d+)\)", text, re.M)}


def test_bearer_flags_one_bit_each_and_the_python_constants_the_same():
    """The halves' flags (PGWU_B_*) each on a bit of their own, below the QFI's (bits 8-13), and the
    Python readers' constants (gtplab.dut.dataplane.B_*) the same bits: two branches once both took
    bit 5 (PGWU_B_CP and PGWU_B_PEER6), and the Python side kept a moved bit's old value."""
    from gtplab.dut import dataplane as dp

    flags = _bearer_flags()
    assert len(flags) >= 8, flags
    assert len(set(flags.values())) == len(flags), f"two PGWU_B_ flags on one bit: {flags}"
    assert max(flags.values()) < dp.B_QFI_SHIFT, flags
    py = {n[2:]: v for n, v in vars(dp).items() if n.startswith("B_") and n != "B_QFI_SHIFT"}
    assert py, "gtplab.dut.dataplane has no B_ constants"
    for name, v in py.items():
        assert name in flags, f"gtplab.dut.dataplane.B_{name} has no PGWU_B_{name} in pgwu.h"
        assert v == 1 << flags[name], f"B_{name} = {v:#x}, pgwu.h says 1 << {flags[name]}"
