"""The GTP-U extension header types the PGW-U comprehends are one list (GTPU_EXT_KNOWN in
dataplane/include/gtpu.h): the types both paths walk past are exactly the types their Supported
Extension Headers Notification lists, in the list's order, and gtplab's oracle (which the XDP path's
and the socket path's tests hold their notifications to) expects that list. Built for this test with a
small C program (tests/dataplane/c/ext_list.c) against the header both paths include."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from gtplab.conformance import oracle
from tests.lib import REPO

DP = REPO / "dataplane"


@pytest.fixture(scope="module")
def facts(tmp_path_factory) -> dict[str, list[int]]:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    assert cc, "a C compiler is needed (setup.sh installs gcc and clang)"
    exe = tmp_path_factory.mktemp("ext") / "ext_list"
    subprocess.run([cc, "-O1", "-Wall", f"-I{DP}", f"-I{DP / 'include'}", f"-I{REPO / 'lib/include'}",
                    str(REPO / "tests/dataplane/c/ext_list.c"), "-o", str(exe)],
                   check=True, capture_output=True, text=True, timeout=120)
    out: dict[str, list[int]] = {"known": [], "ie": [], "msg": [], "sig": [], "errind": []}
    for line in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines():
        what, *nums = line.split()
        out[what] += [int(x) for x in nums]
    return out


def header_list() -> list[int]:
    """The types of the GTPU_EXT_KNOWN X-macro, in its order, read from the header's text."""
    text = (DP / "include/gtpu.h").read_text()
    body = re.search(r"#define GTPU_EXT_KNOWN\(X\)(.*?)\n\n", text, re.S)
    assert body, "GTPU_EXT_KNOWN not found in include/gtpu.h"
    return [int(t, 16) for t in re.findall(r"X\((0x[0-9a-fA-F]+),", body.group(1))]


def test_the_walk_and_the_notification_use_one_list(facts):
    listed = facts["ie"][2:-1]
    assert facts["ie"][:2] == [141, len(listed)] and facts["ie"][-1] == 0xEE, facts["ie"]
    assert sorted(listed) == facts["known"], (listed, facts["known"])
    assert listed == header_list()


def test_the_oracle_expects_the_list_the_pgwu_sends(facts):
    assert list(oracle.KNOWN_EXT_TYPES) == facts["ie"][2:-1]


def test_both_paths_take_the_message_types_of_ts_29_281(facts):
    # Echo Request/Response, Error Indication, Supported Extension Headers Notification, End Marker, G-PDU
    assert facts["msg"] == [1, 2, 26, 31, 254, 255]


def test_both_paths_count_consumed_signalling_under_one_reason_each(facts):
    # Echo Response, Error Indication, Supported Extension Headers Notification, End Marker: the
    # reasons the XDP path and the socket path both take from GTPU_MSG_KNOWN; the names as pgwu says them
    sig = dict(zip(facts["sig"][0::2], facts["sig"][1::2]))
    assert sorted(sig) == [2, 26, 31, 254], sig
    names = {r: n for n, r in reason_numbers().items()}
    assert {t: names.get(r) for t, r in sig.items()} == {
        2: "sig_echo_response", 26: "sig_error_ind", 31: "sig_supp_ext_notif", 254: "sig_end_marker"}


def test_an_error_indication_is_read_the_same_by_both_paths(facts):
    got = [tuple(facts["errind"][i:i + 4]) for i in range(0, len(facts["errind"]), 4)]
    assert got == [(0, 1, 7, 0x01020304),       # TEID Data I and an IPv4 GTP-U Peer Address
                   (1, 1, 7, 0x0a0b0c0d),       # TEID Data I alone: the sender's address
                   (2, 1, 7, 0x0a0b0c0d),       # an IPv6 Peer Address: the sender's (IPv4 bearers)
                   (3, 0, 0, 0),                # cut inside TEID Data I: nothing read
                   (4, 0, 0, 0)], got           # TEID Data I not first: not an Error Indication's


def reason_numbers() -> dict[str, int]:
    """The pgwu_reason enum's names (lower case, without PGWU_R_) and values, from dataplane/pgwu.h."""
    text = (DP / "pgwu.h").read_text()
    body = re.search(r"enum pgwu_reason \{(.*?)\};", text, re.S)
    assert body, "enum pgwu_reason not found in dataplane/pgwu.h"
    out, n = {}, 0
    for name, val in re.findall(r"^\s*PGWU_R_([A-Z0-9_]+)\s*(?:=\s*(\d+))?\s*,", body.group(1), re.M):
        n = int(val) if val else n
        out[name.lower()] = n
        n += 1
    return out
