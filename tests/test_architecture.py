"""The layers of docs/architecture.md, checked on the source: gtplab's imports make no cycle, neither
between its subpackages nor between its modules, wherever the import statement stands (at the top of
a module, inside a function or under TYPE_CHECKING: a function-local import that dodges a cycle is
still a cycle here) and wherever a command line stands (a subpackage's cli.py counts in its folder);
nothing imports a command line; errors.py and rates.py are below everything; and the probes and
clients implement the Protocols the measurement is written against. Reads the files, imports nothing
of what it checks but the Protocols' implementations."""

from __future__ import annotations

import ast
import re
import typing
from collections import defaultdict
from pathlib import Path

from tests.lib import REPO

PKG = REPO / "gtplab"


def _module(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    p = REPO / Path(*name.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def imports() -> list[tuple[str, str, str]]:
    """(importing module, imported gtplab module, "file:line") for every gtplab import statement."""
    out = []
    for path in sorted(PKG.rglob("*.py")):
        mod = _module(path)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                # `from gtplab.lab import config` imports the module gtplab.lab.config
                targets = [f"{node.module}.{a.name}" if _is_module(f"{node.module}.{a.name}") else node.module
                           for a in node.names]
            else:
                continue
            where = f"{path.relative_to(REPO)}:{node.lineno}"
            out += [(mod, t, where) for t in targets if t == "gtplab" or t.startswith("gtplab.")]
    return out


def layer(mod: str) -> str:
    """A module's node in the subpackage graph: its subpackage (gtplab.lab.topology -> lab, and
    gtplab.lab.cli -> lab: a command line counts in its folder, no exception; gtplab.cli.pfcp -> cli,
    the command layer's own folder), or a module of its own at the top (gtplab.errors -> errors)."""
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "gtplab"


def is_command_line(mod: str) -> bool:
    """gtplab.cli and the command lines in it, or a subpackage's cli.py (gtplab.lab.cli)."""
    parts = mod.split(".")
    return parts[1:2] == ["cli"] or (len(parts) > 2 and parts[-1] == "cli")


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_between_subpackages_or_modules():
    found = imports()
    assert len(found) > 50, "the import scan found almost nothing: is the package where it was?"
    by_layer: dict[str, set[str]] = defaultdict(set)
    by_module: dict[str, set[str]] = defaultdict(set)
    where: dict[tuple[str, str], list[str]] = defaultdict(list)
    for src, dst, at in found:
        a, b = layer(src), layer(dst)
        if a != b:
            by_layer[a].add(b)
            where[(a, b)].append(f"{at} ({src} -> {dst})")
        if src != dst:
            by_module[src].add(dst)
            where[(src, dst)].append(at)
    bad = []
    for kind, graph in (("subpackages", by_layer), ("modules", by_module)):
        for comp in cycles(graph):
            at = dict.fromkeys(w for a in comp for b in comp if b in graph[a] for w in where[(a, b)])
            bad.append(f"{kind} {' <-> '.join(comp)}: {'; '.join(at)}")
    assert not bad, "import cycles (docs/architecture.md: a layer imports only the layers below it):\n" \
        + "\n".join(bad)
    # the command layer is on top: nothing imports a command line (gtplab/cli/ loads them by name)
    # but `python -m gtplab`, which runs gtplab.cli
    into_commands = [f"{at}: {src} imports {dst}" for src, dst, at in found
                     if is_command_line(dst) and (src, dst) != ("gtplab.__main__", "gtplab.cli")]
    assert not into_commands, "\n".join(into_commands)
    # below everything: the errors import nothing of gtplab, the rates only the errors
    below = [f"{at}: {src} imports {dst}" for src, dst, at in found
             if (src == "gtplab.errors" and dst != src)
             or (src == "gtplab.rates" and dst not in (src, "gtplab.errors"))]
    assert not below, "\n".join(below)


DOC = REPO / "docs" / "architecture.md"


def doc_ranks() -> dict[str, int]:
    """{layer: rank} from the numbered list between <!-- ranks --> and <!-- /ranks --> in
    docs/architecture.md (1 is the top)."""
    text = DOC.read_text()
    body = re.search(r"<!-- ranks -->(.*?)<!-- /ranks -->", text, re.S)
    assert body, "docs/architecture.md has no <!-- ranks --> list"
    out: dict[str, int] = {}
    for rank, names in re.findall(r"^(\d+)\. (.+)$", body.group(1), re.M):
        for name in re.findall(r"`([^`]+)`", names):
            assert name not in out, f"{name} is given two ranks in docs/architecture.md"
            out[name] = int(rank)
    return out


def test_every_import_goes_down_the_ranks_the_architecture_page_draws():
    """An import between layers goes to a lower rank of docs/architecture.md's list: never up, never
    sideways within a rank; every layer of the package has a rank."""
    ranks = doc_ranks()
    found = imports()
    layers = {layer(m) for src, dst, _ in found for m in (src, dst)}
    assert not layers - set(ranks), f"layers without a rank in docs/architecture.md: {sorted(layers - set(ranks))}"
    bad = sorted({f"{at}: {src} ({layer(src)}, rank {ranks[layer(src)]}) imports {dst} "
                  f"({layer(dst)}, rank {ranks[layer(dst)]})"
                  for src, dst, at in found
                  if layer(src) != layer(dst) and ranks[layer(src)] >= ranks[layer(dst)]})
    assert not bad, "imports against the ranks of docs/architecture.md:\n" + "\n".join(bad)


def test_the_architecture_page_names_every_module():
    """Each module of the package is named in its subpackage's row of the table (its path below
    the subpackage, `mlrsearch/goal.py`, or its file name; `fwd.*` names fwd.py), and each top-level
    module has its own row."""
    rows = dict(re.findall(r"^\| \[`gtplab/([^`]+?)/?`\]\([^)]*\) \|(.*)$", DOC.read_text(), re.M))
    missing = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        if rel.parts == ("__init__.py",) or (len(rel.parts) == 2 and rel.name == "__init__.py"):
            continue
        if len(rel.parts) == 1:
            if rel.name not in rows:
                missing.append(f"{rel} (no row)")
            continue
        row = rows.get(rel.parts[0], "")
        inner = "/".join(rel.parts[1:])
        if not any(f"`{n}`" in row or f"{n}" in row for n in (inner, rel.name, f"{path.stem}.*")):
            missing.append(str(rel))
    assert not missing, "modules docs/architecture.md does not name: " + ", ".join(missing)


def _members(proto: type) -> set[str]:
    """A Protocol's methods and annotated attributes."""
    return {n for n in set(vars(proto)) | set(typing.get_type_hints(proto)) if not n.startswith("_")}


def test_probes_and_clients_have_their_protocols_members():
    """Every DUT probe has every member of gtplab.dut.probe.DutProbe, and both generator clients
    every method of gtplab.traffic.backend.TrafficClient (PfcpDut holds bearers and hands the rest
    to the probe it wraps)."""
    from gtplab.dut.local import LocalDut
    from gtplab.dut.metrics import MetricsDut
    from gtplab.dut.pfcp import PfcpDut
    from gtplab.dut.probe import DutProbe
    from gtplab.dut.prometheus import NoCountersDut, PrometheusDut
    from gtplab.traffic.backend import TrafficClient
    from gtplab.traffic.engine import LocalClient
    from gtplab.traffic.trex.client import TrexClient
    missing = []
    for proto, impls in ((DutProbe, (LocalDut, MetricsDut, PrometheusDut, NoCountersDut)),
                         (TrafficClient, (LocalClient, TrexClient))):
        want = _members(proto)
        assert len(want) >= 10, (proto, want)
        for cls in impls:
            missing += [f"{cls.__name__}.{m} ({proto.__name__})" for m in sorted(want) if not hasattr(cls, m)]
    own = {"install_bearers", "close"}
    missing += [f"PfcpDut.{m}" for m in sorted(own) if m not in vars(PfcpDut)]
    assert "__getattr__" in vars(PfcpDut), "PfcpDut must hand the other probe members to the probe it wraps"
    assert not missing, "missing: " + ", ".join(missing)
