"""A local S3 inside the simulated fleet's fabric, for the tests of the bundle's S3 paths
(the model mirror, test_model_s3.py; the compile store, test_compile_s3.py).

A moto server runs inside the fabric network namespace (``pbsim-fabric``) on
10.213.0.1:8093, where every simulated host reaches it, like a regional bucket; it is
stopped by its PID when the session ends. The hosts have no PyPI and no Debian mirror,
so boto3 reaches them through the roles' ``venv`` way: its wheels (downloaded here once
from PyPI) are served by the fabric web server from ``<www>/test-s3-wheels/`` and
installed with ``--no-index --find-links`` (:func:`boto3_settings`).

Import the fixture into a test module (``from s3_fabric import s3_fabric``); pytest
finds it there. One server serves every test of the session: each test uses a bucket
of its own.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

from prefixbench_sim.layout import FABRIC_ADDRESS, FABRIC_NETNS
from prefixbench_sim.testing import SimFleetHandle, stop_process

MOTO_PORT: Final = 8093
ENDPOINT: Final = f"http://{FABRIC_ADDRESS}:{MOTO_PORT}"
WHEELS: Final = "test-s3-wheels"
KEY_ID: Final = "PBSIMTESTKEYID7F3A9C"
SECRET: Final = "pbsim-secret-7f3a9c-never-printed"  # noqa: S105 - a test key; moto accepts any
#: Where the roles' ``venv`` way puts boto3 on the hosts.
VENV: Final = "/opt/prefixbench-s3/venv"

_CLIENT = """
import boto3
s3 = boto3.client("s3", endpoint_url={endpoint!r}, region_name="us-east-1",
                  aws_access_key_id={key_id!r}, aws_secret_access_key={secret!r})
"""


@dataclass(frozen=True)
class Fabric:
    """The local S3 the hosts reach, and what the fabric web server serves."""

    endpoint: str
    wheels_url: str
    www: Path

    def python(self, code: str, *args: str, timeout: float = 120) -> str:
        """Run ``code`` in the fabric with ``s3`` (a boto3 client of this S3) defined;
        returns its stdout."""
        script = _CLIENT.format(endpoint=self.endpoint, key_id=KEY_ID, secret=SECRET) + code
        proc = in_fabric(sys.executable, "-c", script, *args, timeout=timeout)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout

    def boto3_settings(self) -> dict[str, Any]:
        """The settings that put boto3 on the hosts from the fabric's wheels."""
        return {
            "model_cache_s3_boto3": "venv",
            "model_cache_s3_venv": VENV,
            # pip ignores plain-HTTP links of hosts it is not told to trust.
            "model_cache_s3_pip_args": ["--no-index", "--find-links", self.wheels_url,
                                        "--trusted-host", FABRIC_ADDRESS],
        }


def in_fabric(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", FABRIC_NETNS, *argv], capture_output=True,
                          text=True, timeout=timeout, check=False)


def _boto3_wheels(www: Path) -> str:
    """boto3 and its dependencies for the hosts' Python 3.11, served by the fabric."""
    import boto3  # noqa: PLC0415

    wheels = www / WHEELS
    wheels.mkdir(exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
         "--python-version", "3.11", "--implementation", "cp",
         "--platform", "manylinux2014_x86_64", "--dest", str(wheels),
         f"boto3=={boto3.__version__}"],
        capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        shutil.rmtree(wheels, ignore_errors=True)
        pytest.skip(f"cannot download the boto3 wheels from PyPI: {proc.stderr[-500:]}")
    return f"http://{FABRIC_ADDRESS}:8080/{WHEELS}/"


@pytest.fixture(scope="session")
def s3_fabric(sim_fleet: SimFleetHandle, sim_artifacts: Path,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    """A moto S3 server on the fabric address (stopped by its PID) and boto3's wheels."""
    wheels_url = _boto3_wheels(sim_artifacts)
    logfile = tmp_path_factory.mktemp("moto") / "moto.log"
    log = logfile.open("w")
    # `ip netns exec` execs the command: the PID is moto's own.
    proc = subprocess.Popen(["ip", "netns", "exec", FABRIC_NETNS, sys.executable, "-m",
                             "moto.server", "-H", FABRIC_ADDRESS, "-p", str(MOTO_PORT)],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while in_fabric("nc", "-z", "-w", "1", FABRIC_ADDRESS, str(MOTO_PORT)).returncode:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"moto did not start in {FABRIC_NETNS}: "
                            f"{logfile.read_text()[-2000:]}")
            time.sleep(0.2)
        yield Fabric(ENDPOINT, wheels_url, sim_artifacts)
    finally:
        stop_process(proc)
        log.close()
        shutil.rmtree(sim_artifacts / WHEELS, ignore_errors=True)
