"""`python -m simulator` is `moesim`."""

from simulator.cli import main

raise SystemExit(main())
