"""PFCP (3GPP TS 29.244) on Sx/N4: gtplab as the control plane that provisions any UPF.

    messages.py  messages built with Scapy's layers, per-session templates, a bounded reader
    node.py      the transport (window, sequence numbers, T1/N1) and the node procedures
                 (association, heartbeats both ways, UPF restart detection)
    sessions.py  one session per bearer: establishment, modification, deletion, usage reports
    provision.py a lab config's dut.pfcp, bearer files in and out, the Provisioner that holds a
                 profile's bearers on a UPF, usage checks
    errors.py    the errors, each naming the bearer, the message and the Cause

Its command line, `gtplab pfcp`, is gtplab/cli/pfcp.py (it reads lab configs, which are above pfcp/).
docs/pfcp.md says what is sent and how to point gtplab at other UPFs.
"""
