"""gtplab: a test lab for GTP-U user planes. One subpackage per layer (docs/architecture.md): measure,
traffic, observe, lab, results, dut, pfcp, gtpu, kernel; cli/ is the `gtplab` command, rates.py what a
frame costs on the wire, errors.py the errors they share."""

__version__ = "0.1.0"
