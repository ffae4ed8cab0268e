"""Command line of the simulated fleet: ``setup``, ``up N``, ``down``, ``status``.

``setup`` needs only the standard library (it runs before the controller venv exists on
a fresh CI machine); the other commands import the fleet lazily.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from prefixbench_sim.system import SimFleetError, ensure_host_tools, require_root


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="simfleet",
        description="Simulated Trn2/Trn3 fleet: systemd-nspawn hosts reached over SSH.",
        epilog="Env: PREFIXBENCH_SIM_STATE (state dir, default <repo>/.simfleet), "
        "PREFIXBENCH_CACHE_DIR (rootfs cache, default ~/.cache/prefixbench), "
        "PREFIXBENCH_SIM_BOOT_TIMEOUT (seconds, default 90), "
        "PREFIXBENCH_DEBIAN_MIRROR (for the one-time debootstrap).",
    )
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("setup", help="install the host tools (systemd-container, debootstrap, ...)")
    up = sub.add_parser("up", help="bring the fleet to N hosts (idempotent)")
    up.add_argument("count", type=int, nargs="?", default=3, help="number of hosts (default 3)")
    dress = sub.add_parser("dress", help="give a running bare host a flavour (dlami: set up "
                           "the way the Neuron DLAMI and AWS's guide leave a host; newer: "
                           "the DLAMI of a release no manifest knows)")
    dress.add_argument("host", help="e.g. trn2-sim-2")
    dress.add_argument("flavour", choices=("dlami", "newer"))
    dress.add_argument("--release", default="2.31.0-vllm-beta",
                       help="the release whose DLAMI to dress as (2.31.0-vllm-beta: the "
                            "vLLM 0.21 DLAMI of 2026-07-20; 2.32.0: the vLLM 0.24 DLAMI); "
                            "ignored for newer")
    sub.add_parser("down", help="power off and remove every host, namespace and mount")
    sub.add_parser("status", help="show each host and its vllm-* units")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "setup":
            require_root("setup")
            ensure_host_tools()
            print("simfleet: host tools present", flush=True)
            return 0
        # Lazy: the fleet needs PyYAML, which `setup` must not.
        from prefixbench_sim.fleet import Fleet  # noqa: PLC0415
        from prefixbench_sim.status import format_status  # noqa: PLC0415

        fleet = Fleet()
        if args.command == "up":
            fleet.up(args.count)
        elif args.command == "dress":
            from prefixbench_sim import flavours  # noqa: PLC0415

            host = next((h for h in fleet.hosts() if h.name == args.host), None)
            if host is None:
                raise SimFleetError(f"no running host {args.host}; see `simfleet status`")
            flavour = flavours.dress(fleet, host, args.flavour, args.release)
            print(f"simfleet: {args.host}: {flavour}",
                  flush=True)
        elif args.command == "down":
            fleet.down()
        else:
            print(format_status(fleet.status(), fleet.server_status()), flush=True)
    except SimFleetError as exc:
        print(f"simfleet: error: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print(
            "simfleet: interrupted; run `scripts/simfleet down` to clean up",
            file=sys.stderr,
            flush=True,
        )
        return 130
    return 0
