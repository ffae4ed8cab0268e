"""``python -m prefixbench.sim``: see :mod:`prefixbench.sim.cli`."""

from prefixbench.sim.cli import main

raise SystemExit(main())
