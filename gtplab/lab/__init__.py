"""The namespace lab on this machine: topology.py builds, records and removes it (up/down/status),
cpu.py says which CPUs run the generator and which the DUT, config.py reads lab configs (labs/*.yaml:
which backend, which DUT, which CPUs), cli.py is `gtplab lab`. Used by the measurement, tests, bench/.
"""
