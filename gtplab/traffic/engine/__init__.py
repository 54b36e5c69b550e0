"""The embedded traffic engine: TRex STL profiles run by BPF in the kernel (no TRex server).

LocalClient mirrors trex.stl.api.STLClient for the calls gtplab's runner makes; PortSpec names a
generator port. Split as TRex's stl/ is: client.py (the façade), port.py (a port's state),
streams.py (streams into the ports' BPF objects, profiles into streams), pacing.py (the sending
threads), stats.py (the counters in TRex's shape), capture.py; vm.py compiles a stream's program;
this file re-exports what callers use, as TRex's api.py does. See docs/engine.md for how it works
and what it supports.
"""

from gtplab.traffic.engine.client import LocalClient
from gtplab.traffic.engine.port import PortSpec
from gtplab.traffic.engine.streams import load_profile_streams
from gtplab.traffic.engine.vm import EngineError, compile_stream

__all__ = ["LocalClient", "PortSpec", "EngineError", "compile_stream", "load_profile_streams"]
