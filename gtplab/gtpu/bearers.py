"""`gtplab bearers`: the pgwu bearer file for exactly the bearers a TRex profile sends to.

    gtplab bearers --profile uplink -t size=1424,flows=4096,sgws=8 -o bearers.txt
    pgwu session load bearers.txt

The tunables are parsed by the profiles' own parser (trex_profiles/gtpu_common.py), so the same
`-t` string gives the same bearers in the profile and in the file: bearer i has TEID teid_base + i,
UE ue_base + i, SGW sgw_base + i % sgws and SGW TEID sgw_teid_base + i; with --ip 6 or 4v6 also the
UE's IPv6 /64 at the end of the line (ue6=fd47:7470:XXXX:YYYY::/64, XXXX:YYYY = i).

Used by `gtplab bearers`, gtplab.measure (the bearers of each case) and the profile tests.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path

from gtplab.errors import ResultsWriteError, UserError

PROFILES_DIR = Path(__file__).resolve().parents[2] / "trex_profiles"


def load_common():
    """trex_profiles/gtpu_common.py as a module (it imports neither TRex nor Scapy)."""
    mod = sys.modules.get("gtpu_common")
    if mod is not None and Path(mod.__file__).resolve() == PROFILES_DIR / "gtpu_common.py":
        return mod
    spec = importlib.util.spec_from_file_location("gtpu_common", PROFILES_DIR / "gtpu_common.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules["gtpu_common"] = mod
    return mod


def tunable_argv(values) -> list[str]:
    """Several `-t` values (each 'k=v,k2=v2' or '--k v ...') joined into one argparse list."""
    common = load_common()
    argv: list[str] = []
    for t in values or ():
        try:
            argv += common.normalize_tunables(t)
        except common.ProfileError as e:
            raise UserError(str(e)) from None
    return argv


def profile_args(profile: str, tunables=()):
    """The profile's parsed tunables; tunables in any form a profile accepts (an argparse list, a
    'k=v,...' string, a dict). UserError if they do not make a valid profile."""
    common = load_common()
    try:
        return common.parse(profile, tunables)
    except common.ProfileError as e:
        raise UserError(str(e)) from None


def write_bearer_file(profile: str, tunables, output: str, csum: str = "default") -> int:
    """Write the bearer file for the profile and tunables (as profile_args takes them); returns the
    number of bearers. The file appears complete or not at all (written next to its destination,
    then renamed)."""
    common = load_common()
    args = profile_args(profile, tunables)
    argv = common.normalize_tunables(tunables)
    head = (f"# pgwu bearer file: gtplab bearers --profile {profile}"
            + (f" -t '{' '.join(argv)}'" if argv else "") + "\n"
            f"# {args.bearers} bearers; the profile sends to the first {args.flows}\n"
            "# TEID UE_ADDR SGW_ADDR SGW_TEID [csum=on|off]"
            + (" [ue6=PREFIX/64]" if str(getattr(args, "ip", "4")) != "4" else "") + "\n")
    if output == "-":
        sys.stdout.write(head)
        sys.stdout.writelines(common.bearer_lines(args, csum))
        return args.bearers
    out = Path(output)
    if out.is_dir():
        raise UserError(f"{output} is a directory")
    if not out.parent.is_dir():
        raise UserError(f"{output}: directory {out.parent} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    except OSError as e:             # read-only, full: one line (exit 3), not a traceback
        raise ResultsWriteError(f"Couldn't write the bearer file {output}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "w") as f:
            f.write(head)
            f.writelines(common.bearer_lines(args, csum))
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except OSError as e:
        os.unlink(tmp)
        raise ResultsWriteError(f"Couldn't write the bearer file {output}: {e.strerror or e}") from None
    except BaseException:
        os.unlink(tmp)
        raise
    return args.bearers


def _run(args) -> int:
    n = write_bearer_file(args.profile, tunable_argv(args.tunables), args.output, args.csum)
    if args.output != "-":
        print(f"wrote {n} bearers to {args.output}", file=sys.stderr)
    return 0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "bearers", help="write the pgwu bearer file that matches a TRex profile's bearers",
        description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", choices=("uplink", "downlink"), required=True,
                   help="which profile's tunables (trex_profiles/gtpu_<profile>.py)")
    p.add_argument("-t", "--tunables", action="append", default=[], metavar="K=V[,K=V...]",
                   help="the profile's tunables as given to trex-console -t (repeatable; "
                        "'--flows 64' form also accepted)")
    p.add_argument("--csum", choices=("on", "off", "default"), default="default",
                   help="per-bearer outer UDP checksum flag for the PGW-U's downlink encapsulation")
    p.add_argument("-o", "--output", required=True, help="bearer file to write ('-': stdout)")
    p.set_defaults(func=_run)
