"""The embedded traffic engine: TRex STL profiles run by BPF in the kernel (no TRex server).

LocalClient mirrors trex.stl.api.STLClient for the calls gtplab's runner makes; PortSpec names a
generator port. See docs/engine.md for how it works and what it supports.
"""

from gtplab.traffic.engine.client import LocalClient, PortSpec, load_profile_streams
from gtplab.traffic.engine.vm import EngineError, compile_stream

__all__ = ["LocalClient", "PortSpec", "EngineError", "compile_stream", "load_profile_streams"]
