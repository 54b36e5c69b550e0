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
    out: dict[str, list[int]] = {"known": [], "ie": [], "msg": []}
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
