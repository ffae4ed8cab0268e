"""``python -m prefixbench_sim``: see :mod:`prefixbench_sim.cli`."""

from prefixbench_sim.cli import main

raise SystemExit(main())
