# SPDX-License-Identifier: GPL-2.0
"""The dut role's generator port pairs (docs/ansible.md, "Several generator port pairs"):

    dut_pairs_all: "{{ dut_pairs | gtplab_dut_pairs(one_pair) }}"

dut_pairs empty: the one pair of dut_access_if/dut_sgi_if with the one-pair variables (or none, when
those are empty too). Otherwise each entry is one pair; keys a pair leaves out take pair K's values
of the lab's addressing contract (gtplab/lab/generators.py: SGWs 10.201.K.16.. behind its access
port, PDN 198.18.64K.0/18 behind its SGi port), pair 0's from the one-pair variables. Every entry
comes back with all its keys, checked: a bad one raises one line naming the pair and the key.
"""

from __future__ import annotations

import ipaddress
import re

from ansible.errors import AnsibleFilterError

MAX_PAIRS = 4          # pgwu attach takes up to 4 interfaces per side (dataplane/pgwu_load.c)
MAC_RE = re.compile(r"^([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}$")
IFNAME_RE = re.compile(r"^[^\s,/:]{1,15}$")     # a comma would split `pgwu attach --access a,b`
KEYS = ("access_if", "sgi_if", "access_addr", "sgi_addr", "pdn_prefix", "pdn_gateway", "pdn_gateway_mac",
        "sgw_base", "sgw_count", "sgw_mac", "neighbours")


def _contract(k: int, sgw_count: int) -> dict:
    return {"access_addr": f"10.201.{k}.1/24", "sgi_addr": f"10.202.{k}.1/24",
            "pdn_prefix": f"198.18.{64 * k}.0/18", "pdn_gateway": f"10.202.{k}.2", "pdn_gateway_mac": "",
            "sgw_base": f"10.201.{k}.16", "sgw_count": sgw_count, "sgw_mac": "", "neighbours": []}


def _fail(where: str, msg: str):
    raise AnsibleFilterError(f"dut_pairs: {where}: {msg}")


def _check(k: int, p: dict) -> dict:
    where = f"pair {k}"
    for side in ("access_if", "sgi_if"):
        if not IFNAME_RE.match(str(p.get(side) or "")):
            _fail(where, f"{side} {p.get(side)!r}: an interface name (1-15 characters, no comma, space, '/' or ':')")
    for key in ("access_addr", "sgi_addr"):
        try:
            addr = ipaddress.ip_interface(str(p[key]))
        except ValueError:
            addr = None
        if addr is None or addr.version != 4 or "/" not in str(p[key]):
            _fail(where, f"{key} {p[key]!r}: give A.B.C.D/LEN")
    try:
        net = ipaddress.ip_network(str(p["pdn_prefix"]), strict=True)
        assert net.version == 4
    except (ValueError, AssertionError):
        _fail(where, f"pdn_prefix {p['pdn_prefix']!r}: give a network A.B.C.D/LEN (host bits zero)")
    for key in ("pdn_gateway", "sgw_base"):
        try:
            ipaddress.IPv4Address(str(p[key]))
        except ValueError:
            _fail(where, f"{key} {p[key]!r}: give an IPv4 address A.B.C.D")
    for key in ("pdn_gateway_mac", "sgw_mac"):
        if p[key] and not MAC_RE.match(str(p[key])):
            _fail(where, f"{key} {p[key]!r}: give a MAC aa:bb:cc:dd:ee:ff (or nothing)")
    try:
        count = int(p["sgw_count"])
    except (TypeError, ValueError):
        count = -1
    if count < 0 or int(str(p["sgw_base"]).split(".")[3]) + count > 255:
        _fail(where, f"sgw_base {p['sgw_base']} + sgw_count {p['sgw_count']} must stay in one /24")
    gw = ipaddress.IPv4Address(str(p["pdn_gateway"]))
    if gw not in ipaddress.ip_interface(str(p["sgi_addr"])).network:
        _fail(where, f"pdn_gateway {gw} is not on sgi_addr {p['sgi_addr']}'s network: the PDN route would have no next hop")
    neighbours = p["neighbours"] if isinstance(p["neighbours"], list) else None
    if neighbours is None:
        _fail(where, "neighbours: give a list of {addr: A.B.C.D, mac: MAC, side: access|sgi}")
    for i, n in enumerate(neighbours):
        ok = isinstance(n, dict) and MAC_RE.match(str(n.get("mac", ""))) and n.get("side") in ("access", "sgi")
        try:
            ipaddress.IPv4Address(str(n.get("addr", "")) if isinstance(n, dict) else "")
        except ValueError:
            ok = False
        if not ok:
            _fail(where, f"neighbours[{i}] {n!r}: give {{addr: A.B.C.D, mac: MAC, side: access|sgi}}")
    return {**p, "sgw_count": count, "pdn_gateway_mac": str(p["pdn_gateway_mac"]).lower(),
            "sgw_mac": str(p["sgw_mac"]).lower(),
            "neighbours": [{**n, "mac": str(n["mac"]).lower()} for n in neighbours]}


def gtplab_dut_pairs(pairs, one: dict) -> list[dict]:
    """The pairs, every key filled in and checked (module doc). one: the one-pair variables
    {access_if, sgi_if, access_addr, sgi_addr, pdn_prefix, pdn_gateway, pdn_gateway_mac, sgw_base,
    sgw_count, sgw_mac, neighbours}."""
    if pairs is None or pairs == "":
        pairs = []
    if not isinstance(pairs, list):
        _fail("dut_pairs", "give a list of pairs [{access_if, sgi_if, ...}, ...]")
    if not pairs:
        if not one.get("access_if") and not one.get("sgi_if"):
            return []                       # the embedded lab: no interface
        return [_check(0, {k: one[k] for k in KEYS})]
    if one.get("access_if") or one.get("sgi_if"):
        raise AnsibleFilterError("dut_pairs: give dut_access_if/dut_sgi_if (one pair) or dut_pairs (several), "
                                 "not both (dut_pairs names each pair's interfaces)")
    if len(pairs) > MAX_PAIRS:
        raise AnsibleFilterError(f"dut_pairs: {len(pairs)} pairs, at most {MAX_PAIRS} (pgwu attach takes "
                                 f"{MAX_PAIRS} interfaces per side)")
    out, seen = [], {}
    for k, p in enumerate(pairs):
        if not isinstance(p, dict):
            _fail(f"pair {k}", f"{p!r}: give {{access_if: IFNAME, sgi_if: IFNAME, ...}}")
        unknown = sorted(set(p) - set(KEYS))
        if unknown:
            _fail(f"pair {k}", f"unknown key(s) {', '.join(unknown)} (known: {', '.join(KEYS)})")
        base = {key: one[key] for key in KEYS} if k == 0 else _contract(k, one["sgw_count"])
        q = _check(k, {**base, **p})
        for side in ("access_if", "sgi_if"):
            if q[side] in seen:
                _fail(f"pair {k}", f"{side} {q[side]} is already pair {seen[q[side]]}'s: one interface, one pair")
            seen[q[side]] = k
        out.append(q)
    # the DUT tells the pairs apart by its routes: no two pairs on one subnet or one PDN prefix
    for key in ("access_addr", "sgi_addr", "pdn_prefix"):
        nets = [ipaddress.ip_interface(str(q[key])).network for q in out]
        for i in range(len(nets)):
            for j in range(i):
                if nets[i] == nets[j] or (key != "pdn_prefix" and nets[i].overlaps(nets[j])):
                    _fail(f"pair {i}", f"{key} {out[i][key]} overlaps pair {j}'s {out[j][key]}: the DUT's routes "
                          "must tell the pairs apart")
    return out


class FilterModule:
    def filters(self):
        return {"gtplab_dut_pairs": gtplab_dut_pairs}
