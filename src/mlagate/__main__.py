from mlagate.cli import main

raise SystemExit(main())
