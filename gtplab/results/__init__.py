"""What a run produces and where it goes: store.py writes and reads a results directory
(docs/results.md), report.py renders it as HTML (`gtplab report`), push.py sends cases to a Prometheus
Pushgateway (`gtplab push`), export.py exports metrics from Prometheus (`gtplab export`).
"""
