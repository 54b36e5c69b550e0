"""gtplab's command line imports only the command it runs (gtplab/cli/__init__.py): a command built
alone has exactly the parser it has among all of them, and a light command does not pay for
scapy, the lab and the engine."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gtplab import cli


def _sub(p, name: str):
    [action] = [a for a in p._actions if a.dest == "command"]
    return action.choices[name]


def _walk(p, path=()):
    """(path, parser) of p and every subparser under it."""
    yield path, p
    for a in p._actions:
        if isinstance(a.choices, dict):
            for name, sp in a.choices.items():
                yield from _walk(sp, (*path, name))


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_a_command_built_alone_is_the_command_among_all(name):
    """Every (sub)command's help, options and defaults as `gtplab -h` builds them."""
    alone, full = _sub(cli.build_parser(name), name), _sub(cli.build_parser(), name)
    a, f = dict(_walk(alone)), dict(_walk(full))
    assert a.keys() == f.keys()
    for path in f:
        assert a[path].format_help() == f[path].format_help(), path
        assert a[path]._defaults == f[path]._defaults, path


@pytest.mark.parametrize("argv,want", [
    (["report", "x"], "report"), (["-v", "sweep", "--help"], "sweep"), (["--verbose", "lab", "up"], "lab"),
    (["-h"], None), (["-v", "-h", "sweep"], None), (["nosuch"], None), ([], None), (["-v"], None),
])
def test_the_command_is_found_before_anything_is_imported(argv, want):
    assert cli._command_of(argv) == want


def test_a_light_command_imports_neither_scapy_nor_the_lab(tmp_path):
    """`gtplab report` on a directory that is not a sweep's: one line, exit 2, and neither scapy nor
    the lab's modules were imported for it."""
    code = ("import sys\nfrom gtplab.cli import main\nrc = main(['report', sys.argv[1]])\n"
            "print(rc, sorted(m for m in sys.modules if m == 'scapy' or m.startswith('gtplab.lab')))")
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path / "none")], capture_output=True, text=True,
                       timeout=60)
    assert p.stdout.strip() == "2 []", (p.stdout, p.stderr)
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
