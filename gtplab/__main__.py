"""`python -m gtplab`: the same as the `gtplab` command (gtplab.cli)."""

from gtplab.cli import main

raise SystemExit(main())
