"""TRex's side of the profile tests, shared: the profiles' stream JSON from TRex's own client library in a
subprocess (TrexWorker), tunables as argparse lists (argv), and a small reference implementation of
TRex's field engine (run_program: modular inc/dec, value lists, split_to_cores phases, write /
write-mask, IPv4 fix, the hardware checksum fix of an IPv4 header). Used by tests/trex/test_profiles.py
and tests/trex/test_profiles_ipv6.py."""

from __future__ import annotations

import json
import subprocess
import sys
import base64

from gtplab.gtpu import bearers as gb
from tests.lib import REPO

PROFILE = {p: str(REPO / "trex_profiles" / f"gtpu_{p}.py") for p in ("uplink", "downlink")}
common = gb.load_common()


class TrexWorker:
    """gtplab.traffic.trex.worker: profile_streams(path, direction, port_id, tunables) -> stream JSON."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-m", "gtplab.traffic.trex.worker"], cwd=REPO,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        self.n = 0
        self.cache = {}

    def call(self, method, **params):
        self.n += 1
        self.proc.stdin.write(json.dumps({"id": self.n, "method": method, "params": params}) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        assert answer["id"] == self.n
        if "error" in answer:
            raise LoadError(answer["error"])
        return answer["result"]

    def streams(self, profile, tunables):
        key = (profile, tuple(tunables))
        if key not in self.cache:
            self.cache[key] = self.call("profile_streams", path=PROFILE[profile], direction=0,
                                        port_id=0, tunables=list(tunables))
        return self.cache[key]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


class LoadError(Exception):
    pass


def argv(**kw) -> list[str]:
    out = []
    for k, v in kw.items():
        out += [f"--{k.replace('_', '-')}", str(v)]
    return out


def params(profile, tunables):
    return common.parse(profile, list(tunables))


def binary(stream) -> bytes:
    return base64.b64decode(stream["packet"]["binary"])


def fold(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def run_program(base: bytes, instructions: list[dict], count: int, core: int = 0,
                cores: int = 1, rand=None) -> list[bytes]:
    """op=random draws from rand (a random.Random: TRex's own generator is not reproduced, only
    the semantics: uniform over [min, max] every packet)."""
    state = {}
    for ins in instructions:
        if ins["type"] == "flow_var" and ins.get("value_list") is not None:
            # a value list is an index over the list, split like an inc variable over 0..len-1
            vl = ins["value_list"]
            assert ins["op"] == "inc"
            step = (ins["step"] * (cores if ins["split_to_cores"] else 1)) % len(vl)
            state[ins["name"]] = dict(lo=0, rng=len(vl), step=step, size=ins["size"], list=vl,
                                      value=(core * ins["step"] - step) % len(vl))
        elif ins["type"] == "flow_var" and ins["op"] == "random":
            state[ins["name"]] = dict(random=True, lo=ins["min_value"], hi=ins["max_value"],
                                      size=ins["size"], value=None)
        elif ins["type"] == "flow_var":
            lo, hi = ins["min_value"], ins["max_value"]
            rng = hi - lo + 1
            step = (ins["step"] * (cores if ins["split_to_cores"] else 1)) % rng
            sign = 1 if ins["op"] == "inc" else -1
            # core c starts c steps on, in the variable's own direction (inc_mod / dec_mod)
            first = lo + (ins["init_value"] - lo + sign * core * ins["step"]) % rng
            assert ins["op"] in ("inc", "dec")
            # stored "previous" value, so that the first run yields `first`
            state[ins["name"]] = dict(lo=lo, rng=rng, step=sign * step, size=ins["size"],
                                      value=lo + (first - lo - sign * step) % rng)
    out = []
    for _ in range(count):
        pkt = bytearray(base)
        hw = []
        for ins in instructions:
            t = ins["type"]
            if t == "flow_var":
                v = state[ins["name"]]
                if v.get("random"):
                    v["value"] = rand.randint(v["lo"], v["hi"])
                    continue
                v["value"] = v["lo"] + (v["value"] - v["lo"] + v["step"]) % v["rng"]
            elif t == "write_flow_var":
                v = state[ins["name"]]
                bits = 8 * v["size"]
                cur = v["list"][v["value"]] if "list" in v else v["value"]
                val = (cur + ins["add_value"]) % (1 << bits)
                assert ins["is_big_endian"]
                pkt[ins["pkt_offset"]:ins["pkt_offset"] + v["size"]] = val.to_bytes(v["size"], "big")
            elif t == "write_mask_flow_var":
                v = state[ins["name"]]
                val = (v["value"] + ins["add_value"]) & 0xFFFFFFFF
                if ins["shift"] > 0:
                    val = (val << ins["shift"]) & 0xFFFFFFFF
                elif ins["shift"] < 0:
                    val >>= -ins["shift"]
                o, n = ins["pkt_offset"], ins["pkt_cast_size"]
                assert ins["is_big_endian"]
                cur = int.from_bytes(pkt[o:o + n], "big")
                new = (cur & ~ins["mask"]) | (val & ins["mask"])
                pkt[o:o + n] = (new & ((1 << (8 * n)) - 1)).to_bytes(n, "big")
            elif t == "fix_checksum_ipv4":
                o = ins["pkt_offset"]
                pkt[o + 10:o + 12] = b"\0\0"
                ihl = (pkt[o] & 15) * 4
                pkt[o + 10:o + 12] = (0xFFFF - fold(bytes(pkt[o:o + ihl]))).to_bytes(2, "big")
            elif t == "fix_checksum_hw":
                hw.append(ins)
            else:
                raise AssertionError(f"instruction the reference engine does not know: {t}")
        for ins in hw:
            o, l3 = ins["l2_len"], ins["l3_len"]
            pkt[o + 10:o + 12] = b"\0\0"
            pkt[o + 10:o + 12] = (0xFFFF - fold(bytes(pkt[o:o + l3]))).to_bytes(2, "big")
            total = int.from_bytes(pkt[o + 2:o + 4], "big")
            l4 = o + l3
            ck = l4 + (6 if ins["l4_type"] == 11 else 16)
            pkt[ck:ck + 2] = b"\0\0"
            seg = bytes(pkt[l4:o + total])
            pseudo = bytes(pkt[o + 12:o + 20]) + bytes([0, pkt[o + 9]]) + len(seg).to_bytes(2, "big")
            c = 0xFFFF - fold(pseudo + seg)
            if ins["l4_type"] == 11 and c == 0:
                c = 0xFFFF
            pkt[ck:ck + 2] = c.to_bytes(2, "big")
        out.append(bytes(pkt))
    return out
