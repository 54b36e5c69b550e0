"""gtplab: a test lab for GTP-U user planes. One subpackage per layer (docs/architecture.md): lab,
traffic, dut, measure, results, observe, gtpu, kernel; cli.py is the `gtplab` command, errors.py
the errors they share."""

__version__ = "0.1.0"
