"""A simulated Trn2/Trn3 fleet on one machine: real systemd hosts reached over real SSH.

Each host is a Debian 12 ``systemd-nspawn`` container booted from its own overlay of a
cached root filesystem, in its own network namespace (``pbsim-<name>``) wired to a
bridge in ``pbsim-fabric``, where an HTTP server publishes ``<state>/www`` at
``http://10.213.0.1:8080/``. Nothing is routed out and nothing is added to the machine's
own namespace: Ansible reaches each host through an SSH ``ProxyCommand`` that runs
``nc`` inside the host's namespace.

Driven by ``scripts/simfleet setup | up N | down | status`` (``python -m
prefixbench_sim``); the pure parts are in :mod:`prefixbench_sim.layout` (names,
addresses, paths), :mod:`prefixbench_sim.cmdlines` (the command lines) and
:mod:`prefixbench_sim.hostfiles` (the files written from them).
"""
