"""Write the PFCP fuzz seed corpus (fuzz/corpus/pfcp/) from the named Scapy messages the tests use
(tests/lib/pfcp_msgs.py: one-bearer sessions; tests/lib/pfcp_smf_msgs.py: SMF-shaped sessions with
several QERs and URRs, SDF Filters, placeholder outer headers, Update URR; a modification that adds a
QoS flow's PDRs and one that removes them: tests/pfcp/test_pfcp_agent_mod.py; one with Update PDRs:
tests/pfcp/test_pfcp_agent_update.py). Usage:
python dataplane/fuzz/pfcp_seeds.py [OUT_DIR]"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))      # the repository's top: tests.lib

from tests.lib import pfcp_msgs  # noqa: E402
from tests.lib import pfcp_smf_msgs  # noqa: E402


def rule_ops() -> dict[str, bytes]:
    """Create PDR / FAR / URR / QER and Remove PDR / FAR / URR / QER in a Session Modification"""
    from tests.pfcp.test_pfcp_agent_mod import flow_ies, mod, removal_ies, session
    s = session()
    from tests.pfcp.test_pfcp_agent_update import pdi, upd
    from scapy.contrib import pfcp as sp
    from tests.lib.pfcp_sdf import FLOW
    return {"mod_create_pdrs": bytes(mod(3, 0x100000001, flow_ies(s, qer_closed_ul=True))),
            "mod_remove_pdrs": bytes(mod(4, 0x100000001, removal_ies(qer=True))),
            # Update PDR: a precedence, URR and FAR change; a whole new PDI
            "mod_update_pdrs": bytes(mod(5, 0x100000001, [
                upd(7, sp.IE_Precedence(precedence=5), sp.IE_URR_Id(id=1)),
                upd(8, sp.IE_FAR_Id(id=2)), upd(7, pdi(s, True, (FLOW,)))]))}


def write(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    corpus = {**pfcp_msgs.corpus(), **pfcp_smf_msgs.corpus(), **rule_ops(),
              # the Flow Description classifier also reads each input as text
              "fd_match_all": pfcp_smf_msgs.MATCH_ALL.encode(),
              "fd_host": b"permit out ip from any to 10.45.0.7/32",
              "fd_narrow": b"permit out 17 from 198.51.100.0/24 1000-2000 to assigned frag"}
    for name, b in corpus.items():
        (out / name).write_bytes(b)
    return len(corpus)


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "corpus" / "pfcp"
    print(f"wrote {write(out)} seeds to {out}")
