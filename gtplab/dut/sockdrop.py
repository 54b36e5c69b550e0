"""The socket path's socket-buffer drops counted per G-PDU, for UDP GRO: sockdrop.bpf.o on skb:kfree_skb.

    probe = RcvbufProbe(dut_netns)      # loaded and attached (this process holds it)
    probe.read()                        # {"datagrams": n, "segments": n} since it was attached
    probe.close()                       # detached (also when this process ends)

With UDP_GRO (`pgwu socket --gro`) the kernel merges G-PDUs of one flow into one datagram and, when
the socket's buffer is full, drops it whole and counts it once: Udp RcvbufErrors and the socket's
own drop counter (sk_drops: /proc/net/udp's "drops", SO_MEMINFO) count datagrams, not G-PDUs
(kernel 6.18; measured, docs/socket.md). The probe counts, where the kernel frees such a datagram
(reason SKB_DROP_REASON_SOCKET_RCVBUFF), the datagrams and the G-PDUs in them (gso_segs), for the
UDP sockets on one port in one network namespace, whatever sockets come and go meanwhile (the
counts are the probe's, not a socket's). Loading it needs the kernel's BTF
(/sys/kernel/btf/vmlinux) and the tracepoint's rx_sk argument (Linux 6.11 and later).

Used by gtplab.dut.local (a socket-path lab with the gro knob).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from gtplab.kernel import libbpf
from gtplab.kernel.libbpf import BpfObject

OBJ = Path(__file__).resolve().parent / "sockdrop.bpf.o"
PROG = "sockdrop_kfree_skb"
GTPU_PORT = 2152
BTF = "/sys/kernel/btf/vmlinux"
# what the trial records as the counter the socket-buffer drops came from
SOURCE = "kfree_skb probe: G-PDUs (gso_segs) in the datagrams dropped for a full socket buffer"


def netns_inode(netns: str) -> int:
    """The inode of a named network namespace (/run/netns/NAME), as the kernel's net->ns.inum."""
    return os.stat(f"/run/netns/{netns}").st_ino


class RcvbufProbe:
    """sockdrop.bpf.o loaded into this process, its program attached to skb:kfree_skb (a BTF
    tracepoint: libbpf.tp_btf_link), counting the drops of netns's UDP sockets on port."""

    def __init__(self, netns: str, port: int = GTPU_PORT):
        if not os.path.exists(BTF):
            raise OSError(f"no {BTF}: the kernel has no BTF, the socket-buffer drop probe cannot load")
        self.netns, self.port = netns, port
        self._link = -1
        self._obj = BpfObject(OBJ)
        try:
            self._obj.map("sockdrop_cfg").update(struct.pack("=I", 0),
                                                 struct.pack("=II", netns_inode(netns), port))
            self._link = libbpf.tp_btf_link(self._obj.prog_fd(PROG), "skb:kfree_skb (sockdrop)")
        except BaseException:
            self.close()
            raise

    def read(self) -> dict[str, int]:
        """{"datagrams", "segments"}: the socket-buffer drops since the probe was attached."""
        m = self._obj.map("sockdrop_counts")
        d, s = (struct.unpack("=Q", m.lookup(struct.pack("=I", i)))[0] for i in (0, 1))
        return {"datagrams": d, "segments": s}

    def close(self) -> None:
        if self._link >= 0:
            os.close(self._link)
            self._link = -1
        if self._obj is not None:
            self._obj.close()
            self._obj = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
