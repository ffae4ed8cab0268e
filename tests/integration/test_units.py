"""The two server units on a simulated host: valid units, argv vLLM accepts, the switch
between configurations, and systemd bringing a killed server back."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import jinja2
import pytest

from prefixbench.config import settings
from prefixbench.engines.tokenizer import load as load_tokenizer
from prefixbench.servers import server
from prefixbench_sim.testing import SimFleetHandle, recap
from prefixbench_sim.testing import run_playbook as playbook

pytestmark = pytest.mark.integration

VENV_PY = "/opt/vllm-prefixbench/venv/bin/python"
VLLM = "/opt/vllm-prefixbench/venv/bin/vllm"  # vllm_service_vllm_executable
HERE = Path(__file__).resolve().parent


def neuron_unit(values: dict[str, object], configuration: server.Configuration) -> str:
    """A unit as the vllm_service role's template task renders it (trim_blocks)."""
    spec = server.unit_spec(values, configuration, VLLM)
    template = (HERE.parents[1] / "roles/vllm_service/templates/vllm.service.j2").read_text()
    return jinja2.Environment(trim_blocks=True, keep_trailing_newline=True,  # noqa: S701
                              undefined=jinja2.StrictUndefined).from_string(template).render(
        ansible_managed="Ansible managed", vllm_service_user="vllm",
        vllm_service_unit_dir="/etc/systemd/system", __vllm_service_spec=spec.as_dict())


def metrics(fleet: SimFleetHandle, host_name: str) -> str:
    host = fleet.host(host_name)
    return fleet.ssh(host, ["curl", "-fsS", "http://127.0.0.1:8000/metrics"])


def caching_label(page: str) -> str:
    match = re.search(r'vllm:cache_config_info\{[^}]*enable_prefix_caching="(\w+)"', page)
    assert match, "no vllm:cache_config_info on /metrics"
    return match.group(1)


def start_and_wait(fleet: SimFleetHandle, repo_root: Path, env: dict[str, str], host: str,
                   configuration: str) -> float:
    """Start a configuration with the role's own start tasks; return seconds to healthy."""
    proc, _ = playbook(
        repo_root, env, "tests/integration/helpers/start_configuration.yml",
        "--limit", host, "-e", f"start_configuration={configuration}", timeout=1800)
    assert proc.returncode == 0, proc.stdout[-5000:]
    match = re.search(r"healthy after (\d+) s", proc.stdout)
    assert match, proc.stdout[-3000:]
    return float(match.group(1))


def test_units(sim_fleet: SimFleetHandle, repo_root: Path, ansible_env: dict[str, str]) -> None:
    fleet = sim_fleet
    host = fleet.hosts[0]

    # A value with $ and % in the unit's environment (checked in the running process).
    env_vars = json.dumps({"vllm_service_environment": {"VLLM_CPU_KVCACHE_SPACE": "1",
                                                        "PB_CHECK": "a$b%c"}})
    proc, _ = playbook(repo_root, ansible_env, "playbooks/deploy.yml", "--limit", host.name,
                       "-e", env_vars)
    assert proc.returncode == 0, proc.stdout[-5000:]
    proc, _ = playbook(repo_root, ansible_env, "playbooks/deploy.yml", "--limit", host.name,
                       "-e", env_vars)
    assert recap(proc.stdout)[host.name]["changed"] == 0, proc.stdout[-5000:]

    # Both units, and the Neuron variant of the tutorial's unit, verify cleanly.
    for unit in ("vllm-baseline.service", "vllm-cached.service"):
        out = fleet.fleet.ssh(host, ["systemd-analyze", "verify", f"/etc/systemd/system/{unit}"])
        assert out.returncode == 0 and out.stderr.strip() == "", (unit, out.stderr)
    # The Neuron units (trn2, trn3) are never deployed on a CPU host: render them from the
    # role's template and verify them there (tests/unit/test_unit_verify.py does so offline).
    # Each at the first-start level (aws: AWS's grants) and at strict (its devices too),
    # on a host whose release has been read (roles/neuron_sdk release: 2.32.0 here).
    for instance_type, level in (("trn2.48xlarge", "aws"), ("trn3.48xlarge", "strict")):
        values = settings.validate({"prefixbench_platform": "neuron",
                                    "prefixbench_instance_type": instance_type,
                                    "prefixbench_neuron_release": "2.32.0",
                                    "vllm_service_sandbox": level,
                                    "vllm_service_model": "openai/gpt-oss-120b"}, "n").settings
        for configuration in server.CONFIGURATIONS:
            text = neuron_unit(values, configuration)
            assert "LimitMEMLOCK=infinity\n" in text, text
            assert ("DeviceAllow=char-neuron rw\n" in text) is (level == "strict"), text
            path = f"/var/tmp/pb/{instance_type}/{server.unit_name(configuration)}"
            fleet.sh(host, f"mkdir -p /var/tmp/pb/{instance_type} && cat > {path} <<'EOF'\n"
                     + text + "EOF")
            out = fleet.fleet.ssh(host, ["systemd-analyze", "verify", path])
            assert out.returncode == 0 and out.stderr.strip() == "", (path, out.stderr)

    # vLLM's own parser accepts the argv of both configurations, sim and tutorial (Neuron).
    sim = settings.validate({"prefixbench_instance_type": "trn2.48xlarge",
                             "prefixbench_platform": "cpu",
                             "vllm_service_model": "/opt/models/tiny-gptoss",
                             "vllm_service_hf_overrides": {}}, "sim").settings
    tutorial = settings.validate({"prefixbench_instance_type": "trn3.48xlarge",
                                  "vllm_service_model": "openai/gpt-oss-120b"}, "t").settings
    fleet.sh(host, "mkdir -p /var/tmp/pb && cat > /var/tmp/pb/parse.py <<'EOF'\n"
             + (HERE / "helpers" / "parse_vllm_argv.py").read_text() + "\nEOF")
    cases = [(name, values, configuration)
             for name, values in (("sim", sim), ("tutorial", tutorial))
             for configuration in server.CONFIGURATIONS]
    argvs = [server.serve_argv(values, configuration) for _, values, configuration in cases]
    # One import of vLLM parses all four (each import costs 10-15 s on the shared cores).
    answers = json.loads(fleet.ssh(host, [VENV_PY, "/var/tmp/pb/parse.py",
                                          json.dumps(argvs)], timeout=300))
    assert len(answers) == len(cases), answers
    for (name, _, configuration), parsed in zip(cases, answers, strict=True):
        # baseline says --no-enable-prefix-caching; cached leaves vLLM's default (on).
        expected = (None, True) if configuration == "cached" else (False,)
        assert parsed["enable_prefix_caching"] in expected, (name, parsed)
        assert parsed["max_num_batched_tokens"] == 1024
        if name == "tutorial":
            assert parsed["hf_overrides"] == {"quantization_config": {}}
            assert parsed["additional_config"]["neuron_config"][
                "kv_segment_size_buckets"] == [1024]

    # Baseline: healthy, caching off. Then cached: the baseline stops, caching on.
    first = start_and_wait(fleet, repo_root, ansible_env, host.name, "baseline")
    assert caching_label(metrics(fleet, host.name)) == "False"
    second = start_and_wait(fleet, repo_root, ansible_env, host.name, "cached")
    assert caching_label(metrics(fleet, host.name)) == "True"
    states = fleet.sh(host, "systemctl is-active vllm-baseline.service "
                            "vllm-cached.service || true").split()
    assert states == ["inactive", "active"]

    # gpt-oss as the fleet serves it: scheduled as Neuron schedules it (the reference
    # NeuronScheduler, every layer in one full-attention group, as the plugin allocates
    # them: vLLM says both in its journal), and chat rendered with harmony exactly as the
    # bundle renders a chat line (engines.harmony through the run's tokenizer): the
    # server's prompt ids equal ours, id for id.
    journal = fleet.sh(host, "journalctl -u vllm-cached.service --no-pager -o cat")
    assert "Using custom scheduler class prefixbench_neuron_scheduler.NeuronScheduler" \
        in journal, journal[-3000:]
    assert "Hybrid KV cache manager is disabled for this hybrid model" in journal, \
        journal[-3000:]
    chat = [{"role": "system", "content": "You answer in one word. Be kind."},
            {"role": "user", "content": "What colour is the sky?"},
            {"role": "assistant", "content": "Blue.", "reasoning": "Easy one."},
            {"role": "user", "content": "And the sea, at night?"}]
    body = json.dumps({"model": "tiny-gptoss", "messages": chat, "max_tokens": 1,
                       "return_token_ids": True})
    reply = json.loads(fleet.ssh(host, [
        "curl", "-fsS", "http://127.0.0.1:8000/v1/chat/completions",
        "-H", "content-type: application/json", "-d", body]))
    ours = load_tokenizer(fleet.paths.www / "models" / "tiny-gptoss")
    assert ours.harmony
    assert reply["prompt_token_ids"] == ours.encode(ours.render_chat(chat))

    # vLLM's internal channels face no network: every TCP socket the service user's
    # processes listen on is on loopback, and a neighbour cannot connect to any of them.
    # (an if, not `[ ] && echo`: a last line owned by another user, sshd's, would end
    # the loop, and under sh -e the script, with status 1; ss lists in no fixed order)
    listening = fleet.sh(host, "ss -Hltnp | grep -F \"pid=\" | while read -r l; do "
                               "pid=${l##*pid=}; pid=${pid%%,*}; "
                               "if [ \"$(ps -o user= -p \"$pid\")\" = vllm ]; then "
                               "echo \"$l\"; fi; done")
    addresses = [line.split()[3] for line in listening.splitlines() if line.strip()]
    assert addresses, "the running server listens on nothing?"
    exposed = [a for a in addresses if not a.startswith(("127.0.0.1:", "[::1]:"))]
    assert exposed == [], listening
    neighbour = fleet.hosts[1]
    for port in {a.rsplit(":", 1)[1] for a in addresses}:
        probe = fleet.fleet.ssh(neighbour, [
            "python3", "-c", "import socket, sys; socket.create_connection("
            "(sys.argv[1], int(sys.argv[2])), 2)", host.address, port])
        assert probe.returncode != 0, f"{neighbour.name} reached {host.address}:{port}"
    # Environment= values reach the process unaltered ($ is not doubled).
    environ = fleet.sh(host, "pid=$(systemctl show -p MainPID --value vllm-cached.service);"
                             " tr '\\0' '\\n' < /proc/$pid/environ")
    assert "PB_CHECK=a$b%c" in environ.splitlines(), environ
    print(f"\ntime to healthy on {host.name}: baseline (first) {first:.0f} s, "
          f"cached (second, compile cache reused) {second:.0f} s")

    # kill -9 of the server: systemd brings it back.
    main_pid = fleet.sh(host, "systemctl show -p MainPID --value vllm-cached.service").strip()
    restarts = int(fleet.sh(host, "systemctl show -p NRestarts --value vllm-cached.service"))
    fleet.ssh(host, ["kill", "-9", main_pid])
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        now = int(fleet.sh(host, "systemctl show -p NRestarts --value vllm-cached.service"))
        code = fleet.sh(host, "curl -s -o /dev/null -w '%{http_code}' "
                              "http://127.0.0.1:8000/health || true").strip()
        if now > restarts and code == "200":
            break
        time.sleep(1)
    else:
        pytest.fail("vllm-cached.service did not come back after kill -9")

    # A deploy that changes the servers' environment stops the server still running the
    # old one: the next start (a bench's) runs the new environment, not the old process.
    changed = json.dumps({"vllm_service_environment": {"VLLM_CPU_KVCACHE_SPACE": "1",
                                                       "PB_CHECK": "changed"}})
    proc, _ = playbook(repo_root, ansible_env, "playbooks/deploy.yml", "--limit", host.name,
                       "-e", changed)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "stop a server started with an older configuration" in proc.stdout, \
        proc.stdout[-5000:]
    state = fleet.sh(host, "systemctl is-active vllm-cached.service || true").strip()
    assert state in ("inactive", "failed"), state  # (failed: stopped while it started)
