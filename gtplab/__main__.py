from gtplab.cli import main

raise SystemExit(main())
