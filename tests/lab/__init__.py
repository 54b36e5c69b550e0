"""The namespace lab (gtplab/lab/topology.py)."""
