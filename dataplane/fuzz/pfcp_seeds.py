"""Write the PFCP fuzz seed corpus (fuzz/corpus/pfcp/) from the named Scapy messages the tests use
(tests/lib/pfcp_msgs.py). Usage: python dataplane/fuzz/pfcp_seeds.py [OUT_DIR]"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))      # the repository's top: tests.lib

from tests.lib import pfcp_msgs  # noqa: E402


def write(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    corpus = pfcp_msgs.corpus()
    for name, b in corpus.items():
        (out / name).write_bytes(b)
    return len(corpus)


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "corpus" / "pfcp"
    print(f"wrote {write(out)} seeds to {out}")
