"""Load a TRex STL profile with TRex's own client library and print its streams as JSON.

    python -m gtplab.traffic.engine.stream_loader PATH [--direction D] [--port P] [--tunable k=v ...]

Runs in its own process because lbr-trex-client puts its bundled scapy 2.4.3 first on sys.path.
Prints a JSON list of STLStream.to_json() dicts (with "name" when the stream has one); on error
prints one line to stderr and exits 2.

Run by gtplab.traffic.engine.streams.load_profile_streams (LocalClient.load_profile); it loads
TRex *profiles* into *streams*, hence its name.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gtplab.traffic.engine.stream_loader", description=__doc__.splitlines()[0])
    p.add_argument("path", help="TRex STL profile (.py with register() and get_streams())")
    p.add_argument("--direction", type=int, default=0, help="profile direction (default 0)")
    p.add_argument("--port", type=int, default=0, help="port id the profile is loaded for (default 0)")
    p.add_argument("--tunable", action="append", default=[], metavar="K=V",
                   help="tunable passed to the profile as --K V (repeatable)")
    args = p.parse_args(argv)
    tunables = {}
    for t in args.tunable:
        k, sep, v = t.partition("=")
        if not sep or not k:
            print(f"bad tunable '{t}' (want key=value)", file=sys.stderr)
            return 2
        tunables[k] = v
    warnings.simplefilter("ignore")
    try:
        import lbr_trex_client  # noqa: F401  (sets up the trex package path)
        from trex.stl.api import STLProfile
        prof = STLProfile.load(args.path, direction=args.direction, port_id=args.port, **tunables)
        if prof is None:
            raise ValueError("profile printed its help instead of streams")
        out = []
        for s in prof.get_streams():
            js = s.to_json()
            if s.get_name():
                js["name"] = s.get_name()
            out.append(js)
    except Exception as e:  # one line for the parent
        msg = " ".join(str(e).split()) or type(e).__name__
        print(f"{type(e).__name__}: {msg[-400:]}", file=sys.stderr)
        return 2
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
