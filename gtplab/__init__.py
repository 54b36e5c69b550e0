"""gtplab: a test lab for GTP-U user planes."""

__version__ = "0.1.0"
