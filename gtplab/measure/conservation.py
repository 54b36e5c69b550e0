"""Packet conservation: every packet the generator sent is accounted for, per direction.

    generator tx  =  DUT rx  +  lost on the way in (link)
    DUT rx        =  forwarded + dropped (by reason) + passed to the kernel (by reason)
    forwarded     =  generator rx  +  lost on the way out (link)
                     -  sent by the DUT's kernel for packets passed to it (when the caller measures it)

The last term is for packets the program passes to the kernel that the kernel then sends on: outer
fragments reassembled into one G-PDU that `pgwu reassemble` forwards (several frames in, one out),
or an encapsulated packet the kernel cuts into outer fragments (one in, several out). The caller
measures it outside the program (the reassembler's forwarded counter, the DUT netns's FragCreates);
not given, it is 0, so a kernel that sends anything still unbalances the equation.

DUT rx is measured independently of the DUT's own counters where the lab can (the DUT ingress
interface's XDP packet counter on the embedded lab); link losses come from the veths' XDP transmit
error counters (embedded lab) and are unknown (taken as 0) on a real lab. Any difference that the
numbers do not explain is an error: the sweep records it per case, the tests fail with it.

Background frames. On a real link the test's frames are not alone: ARP, IPv6 neighbour and router
discovery, LLDP, the kernels' own datagrams. They are counted apart, by kind, and never enter the
balance as a loss or as "unexplained" (Background; docs/lab.md, "Background frames"):

    generator rx     =  the test's frames (known by their stream)  +  background received, by kind
    DUT ingress rx   =  the test's frames in  +  background sent to that port by the generator side
    DUT counters     =  DUT ingress rx  +  background sent to the DUT's other port

The DUT's own counters cannot tell a background frame from a test frame it passed to its kernel
(pass_not_ipv4 counts ARP, IPv6 and LLDP alike; pass_not_gtpu / pass_not_ue a stray datagram as a
test packet the DUT passes): the balance takes the background the generator side sent, by kind,
counted where it leaves (gtplab.traffic.engine: tc egress of each generator port; TRex: its
capture of the frames that are not the test's, gtplab.traffic.trex.background). The DUT
kernel's own frames (its ARP replies ...) never pass the DUT's program: the generator counts them
as background received.

Used by gtplab.measure.runner (every trial) and the correctness tests.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class DutDelta:
    """What the DUT counted during one trial (deltas of `pgwu stats`)."""
    rx_packets: int                      # every packet the program saw (sum over reasons and verdicts)
    fwd_packets: int                     # *_fwd with verdict redirect/tx
    drops_by_reason: dict[str, int] = field(default_factory=dict)   # verdict drop or aborted, or a
    #                                                                  drop_* answered (verdict tx)
    passed_by_reason: dict[str, int] = field(default_factory=dict)  # verdict pass (to the kernel)
    other: dict[str, int] = field(default_factory=dict)             # tx/redirect not *_fwd (echo)

    @property
    def drop_packets(self) -> int:
        return sum(self.drops_by_reason.values())

    @property
    def pass_packets(self) -> int:
        return sum(self.passed_by_reason.values())

    @classmethod
    def from_counters(cls, before: dict[tuple[str, str], int], after: dict[tuple[str, str], int]) -> "DutDelta":
        """From two snapshots {(reason, verdict): packets}."""
        d = {k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after)}
        d = {k: v for k, v in d.items() if v}
        fwd = drops = 0
        out = cls(rx_packets=sum(d.values()), fwd_packets=0)
        for (reason, verdict), n in sorted(d.items()):
            if reason.endswith("_fwd") and verdict in ("redirect", "tx"):
                fwd += n
            elif verdict in ("drop", "aborted") or (reason.startswith("drop_") and verdict == "tx"):
                # drop_* with tx: the packet was not forwarded, its frame became a reply to its
                # sender (an Error Indication ...): a drop of that reason all the same
                out.drops_by_reason[reason] = out.drops_by_reason.get(reason, 0) + n
            elif verdict == "pass":
                out.passed_by_reason[reason] = out.passed_by_reason.get(reason, 0) + n
            else:
                out.other[f"{reason}/{verdict}"] = n
        out.fwd_packets = fwd
        return out


@dataclass
class Background:
    """The frames of a trial that are not the test's, by kind (gtplab.traffic.engine.stats.BG_KINDS):
    gen_rx, received by the generator's receiving port; to_dut_in, sent by the generator side into
    the DUT's ingress port; to_dut_other, into the DUT's other port (an ARP reply of the generator's
    kernel ...). The engine counts them itself; TRex from a filtered capture of the trial
    (gtplab.traffic.trex.background). None: not measured (the generator's counts are then taken as
    the test's)."""
    gen_rx: dict[str, int] | None = None
    to_dut_in: dict[str, int] | None = None
    to_dut_other: dict[str, int] | None = None

    @property
    def n_gen_rx(self) -> int:
        return sum((self.gen_rx or {}).values())

    @property
    def n_in(self) -> int:
        return sum((self.to_dut_in or {}).values())

    @property
    def n_other(self) -> int:
        return sum((self.to_dut_other or {}).values())

    def as_dict(self) -> dict[str, Any]:
        return {"generator_rx": self.gen_rx, "to_dut_ingress": self.to_dut_in,
                "to_dut_other_port": self.to_dut_other}


@dataclass
class Conservation:
    ok: bool
    gen_tx: int
    dut_rx: int
    dut_rx_source: str                   # "ingress interface" or "DUT counters"
    fwd: int
    drops: int
    passed: int
    other: int
    gen_rx: int
    link_in_lost: int | None
    link_out_lost: int | None
    errors: list[str]
    scope: str = "generator and DUT"     # "generator only": the DUT's counters are not read
    kernel_fwd: int = 0                  # frames the DUT's kernel sent out for packets passed to it
    places: dict[str, int] | None = None  # where each lost packet is, by name, and "unexplained"
    #                                       (the rest): a kernel-path DUT (gtplab.dut.kernelpath), or
    #                                       the links only (generator_only)
    background: dict[str, Any] | None = None  # frames that are not the test's, by kind and where
    #                                           (Background.as_dict); None: not measured
    dut_background: int = 0              # of the DUT's counted packets, background frames (both ports)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.background is None:      # not measured: the record as it was before it was
            del d["background"], d["dut_background"]
        return d

    def message(self) -> str:
        head = (f"generator tx {self.gen_tx}, DUT rx {self.dut_rx} ({self.dut_rx_source}), forwarded "
                f"{self.fwd}" + (f" (+ {self.kernel_fwd} sent by its kernel)" if self.kernel_fwd else "")
                + f", dropped {self.drops}, passed {self.passed}, other {self.other}, generator rx "
                f"{self.gen_rx}, link lost in {self.link_in_lost}, out {self.link_out_lost}")
        if self.background and any(self.background.values()):
            head += ", background (not the test's) " + "; ".join(
                f"{k} " + ", ".join(f"{n} {kind}" for kind, n in sorted(v.items()))
                for k, v in self.background.items() if v)
        if self.places:
            head += ", by place: " + ", ".join(f"{k} {v}" for k, v in sorted(self.places.items()))
        return head + ("" if self.ok else ": " + "; ".join(self.errors))


def check(gen_tx: int, gen_rx: int, dut: DutDelta, *, dut_rx: int | None = None,
          link_in_lost: int | None = None, link_out_lost: int | None = None,
          kernel_fwd: int = 0, background: Background | None = None) -> Conservation:
    """Check the three equations. dut_rx: the DUT's receive count measured outside its program (None:
    the sum of its counters, so only the other two equations say something). link_*_lost: packets
    lost between generator and DUT (None: unknown, taken as 0, i.e. any difference is unexplained).
    kernel_fwd: frames the DUT's kernel sent towards the generator for packets the program passed
    to it, measured by the caller (module doc). gen_rx: every frame the generator's port received;
    background: the frames of the trial that are not the test's (module doc), each on its side of the
    balance, never a loss."""
    errors = []
    bg = background or Background()
    counted = dut.fwd_packets + dut.drop_packets + dut.pass_packets + sum(dut.other.values())
    rx = counted - bg.n_other if dut_rx is None else dut_rx
    lin = link_in_lost or 0
    lout = link_out_lost or 0
    gen_rx -= bg.n_gen_rx                # the test's frames only
    if gen_tx + bg.n_in != rx + lin:
        by = f" + background sent to it {bg.n_in}" if bg.n_in else ""
        errors.append(f"generator tx {gen_tx}{by} != DUT rx {rx} + lost on the way in {lin} "
                      f"(unexplained: {gen_tx + bg.n_in - rx - lin:+d})")
    if rx + bg.n_other != counted:
        by = f" + background on its other port {bg.n_other}" if bg.n_other else ""
        errors.append(f"DUT rx {rx}{by} != forwarded {dut.fwd_packets} + dropped {dut.drop_packets} + passed "
                      f"{dut.pass_packets} + other {sum(dut.other.values())} "
                      f"(unexplained: {rx + bg.n_other - counted:+d})")
    if dut.fwd_packets + kernel_fwd != gen_rx + lout:
        by = f" + sent by its kernel {kernel_fwd}" if kernel_fwd else ""
        errors.append(f"DUT forwarded {dut.fwd_packets}{by} != generator rx {gen_rx} + lost on the way out "
                      f"{lout} (unexplained: {dut.fwd_packets + kernel_fwd - gen_rx - lout:+d})")
    return Conservation(ok=not errors, gen_tx=gen_tx, dut_rx=rx,
                        dut_rx_source="DUT counters" if dut_rx is None else "ingress interface",
                        fwd=dut.fwd_packets, drops=dut.drop_packets, passed=dut.pass_packets,
                        other=sum(dut.other.values()), gen_rx=gen_rx, link_in_lost=link_in_lost,
                        link_out_lost=link_out_lost, errors=errors, kernel_fwd=kernel_fwd,
                        background=background.as_dict() if background is not None else None,
                        dut_background=bg.n_in + bg.n_other)


def generator_only(gen_tx: int, gen_rx: int, link_in_lost: int | None = None,
                   link_out_lost: int | None = None, background: Background | None = None) -> Conservation:
    """A DUT whose counters are not read (lab config dut.counters: none): nothing can be balanced
    against the DUT, so the record says so (scope). The loss, the generator's tx - rx, is located
    only where the lab's links count it (link_*_lost, None: not measured); whatever is left is
    "unexplained" and the trial is not ok: a loss nothing located is never "conservation ok".
    background: frames that are not the test's; those the generator received are not its rx."""
    lin, lout = link_in_lost or 0, link_out_lost or 0
    gen_rx -= background.n_gen_rx if background is not None else 0
    rest = gen_tx - gen_rx - lin - lout
    places = {k: v for k, v in (("link_in", lin), ("link_out", lout), ("unexplained", rest)) if v}
    errors = [] if not rest else [
        f"{rest:+d} packets between generator tx {gen_tx} and rx {gen_rx} are not located (lost in the link "
        f"{lin} in, {lout} out): dut.counters none reads no counter of the DUT (kernelpath for a UPF on "
        "sockets and TUN, docs/lab.md)"]
    return Conservation(ok=not errors, gen_tx=gen_tx, dut_rx=0, dut_rx_source="not read (dut.counters: none)",
                        fwd=0, drops=0, passed=0, other=0, gen_rx=gen_rx, link_in_lost=link_in_lost,
                        link_out_lost=link_out_lost, errors=errors, places=places or None,
                        scope="generator only: no DUT counters; the DUT's share of the loss is unknown",
                        background=background.as_dict() if background is not None else None)


def check_places(pl: dict, gen_tx: int, gen_rx: int, *, link_in_lost: int | None,
                 link_out_lost: int | None = None,
                 background: Background | None = None) -> tuple[Conservation, DutDelta]:
    """A DUT on the kernel's path (dut.counters kernelpath): its trial's places (gtplab.dut.kernelpath.
    places(): DUT rx, forwarded, each drop by place, the egress veth's drops of the stack's sends)
    balanced as check() does, the remainder named "unexplained" in Conservation.places. link_in_lost:
    the generator veth's losses into the DUT; link_out_lost: the egress veth's XDP losses (0 without
    XDP), to which the stack's drops there are added. A negative place (the counters do not follow the
    packets' path) and pl's own errors fail it too."""
    dd = DutDelta(rx_packets=pl["dut_rx"], fwd_packets=pl["fwd"], drops_by_reason=dict(pl["places"]))
    # (the kernel path's places count what the DUT's stack did with the test's packets: a
    # background frame sent to the DUT is not among them, so only the generator's side is taken)
    bg = Background(gen_rx=background.gen_rx) if background is not None else None
    cons = check(gen_tx, gen_rx, dd, dut_rx=pl["dut_rx"], link_in_lost=link_in_lost,
                 link_out_lost=(link_out_lost or 0) + pl["lost_out"], background=bg)
    cons.dut_rx_source = "DUT ingress veth (kernel path)"
    cons.scope = "generator and DUT (kernel path: the DUT netns's counters)"
    rest = pl["dut_rx"] - pl["fwd"] - sum(pl["places"].values())
    cons.places = dict(pl["places"], **({"unexplained": rest} if rest else {}))
    cons.errors += pl.get("errors", [])
    neg = {k: v for k, v in pl["places"].items() if v < 0}
    if neg:
        cons.errors.append("negative counts at " + ", ".join(f"{k} {v}" for k, v in sorted(neg.items()))
                           + ": the counters do not follow the path of the trial's packets")
    cons.ok = not cons.errors
    return cons, dd
