"""What a run produces and where it goes: store.py writes and reads a results directory
(docs/results.md), report.py renders it as HTML (`gtplab report`: analysis.py computes what it shows,
plots.py draws it, html.py writes the page), push.py sends cases to a Prometheus Pushgateway
(`gtplab push`), export.py exports metrics from Prometheus (`gtplab export`).
"""
