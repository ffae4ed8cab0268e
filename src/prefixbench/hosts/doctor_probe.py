"""The checks ``prefixbench doctor`` runs on a host, inside the server unit's sandbox.

Standard library only: the controller sends this file's text to the host
(``prefixbench_doctor`` module), where the vLLM environment's interpreter runs it in a
transient systemd unit with the server unit's user, environment, limits and sandbox
directives. It prints one JSON object: ``{check: {"ok": bool, "detail": str}}`` plus
``"neuron_ls"`` (``neuron-ls -j``'s output, compared with the instance catalogue on the
controller). The configuration comes as a JSON file named by ``argv[1]``:

``platform``      "neuron" or "cpu"
``imports``       module names the server imports (vllm, and vllm_neuron on Neuron)
``distributions`` distribution names that must be installed (libtorch-neuronx-lite)
``compiler``      the executable the server runs to compile graphs: ``neuronx-cc`` on
                  Neuron (the plugin's subprocess), the C++ compiler torch inductor runs on
                  CPU; looked up on the unit's PATH
``devices``       a glob of the device nodes the service user must open (``/dev/neuron*``)
``neuron_ls``     the path of neuron-ls
``cache_dir``     VLLM_CACHE_ROOT: the compile cache, written by the server
``nofile``        the open-files limit the server needs
``model_dir``     the model's directory; ``model_bytes`` the room it needs when absent
``vocab_dir``     the tiktoken vocabulary directory ("" when the model needs none)
``efa_dir``       where the kernel lists RDMA devices (``/sys/class/infiniband``; "" off
                  Neuron): the ``efa`` check counts those bound to the efa driver and, where
                  there are none, checks the unit sets ``NEURON_SKIP_EFA_AFFINITY=1``
``runtime``       the platform whose runtime the ``runtime`` check starts: "neuron" (libnrt's
                  ``nrt_init`` on one NeuronCore, then ``nrt_close``) or "cpu" (torch and
                  vLLM's platform); ``runtime_timeout`` its seconds
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def _check_imports(cfg: dict[str, Any]) -> tuple[bool, str]:
    found = []
    for name in cfg.get("imports") or []:
        try:
            mod = importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - any import failure is the answer
            return False, f"import {name}: {type(exc).__name__}: {str(exc)[:200]}"
        found.append(f"{name} {getattr(mod, '__version__', '')}".strip())
    for dist in cfg.get("distributions") or []:
        try:
            found.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            return False, f"{dist} is not installed in {sys.prefix}"
    return True, ", ".join(found)


def _check_compiler(cfg: dict[str, Any]) -> tuple[bool, str]:
    name = str(cfg.get("compiler") or "")
    where = shutil.which(name) if name else None
    path = os.environ.get("PATH", "")
    if where is None:
        return False, f"{name} is not on the unit's PATH ({path})"
    return True, where


def _check_devices(cfg: dict[str, Any]) -> tuple[bool, str]:
    pattern = str(cfg.get("devices") or "")
    if not pattern:
        return True, "no device needed"
    where = Path(pattern)
    nodes = sorted(str(p) for p in where.parent.glob(where.name))
    if not nodes:
        return False, f"no {pattern} visible to the service user"
    for node in nodes:
        try:
            fd = os.open(node, os.O_RDWR)
        except OSError as exc:
            return False, f"cannot open {node}: {exc.strerror}"
        os.close(fd)
    return True, f"{len(nodes)} opened read-write"


def _check_cache(cfg: dict[str, Any]) -> tuple[bool, str]:
    root = str(cfg.get("cache_dir") or "")
    if not root:  # NamedTemporaryFile(dir="") would write in the working directory
        return False, "no cache directory to check (cache_dir is empty)"
    try:
        with tempfile.NamedTemporaryFile(dir=root, prefix=".doctor-"):
            pass
    except OSError as exc:
        return False, f"cannot write in {root}: {exc.strerror}"
    return True, f"{root} writable"


def _check_nofile(cfg: dict[str, Any]) -> tuple[bool, str]:
    want = int(cfg.get("nofile") or 0)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < want:
        return False, f"open-files limit {hard}, the server needs {want}"
    return True, f"soft {soft}, hard {hard}"


def _check_model(cfg: dict[str, Any]) -> tuple[bool, str]:
    model = Path(str(cfg.get("model_dir") or "/nonexistent"))
    if (model / "config.json").is_file():
        weights = sorted(model.glob("*.safetensors"))
        if not weights:
            return False, f"{model} has config.json but no *.safetensors"
        size = sum(w.stat().st_size for w in weights)
        return True, f"{model}: {len(weights)} weight files, {size / 2**30:.2f} GiB"
    need = int(cfg.get("model_bytes") or 0)
    probe = model
    while not probe.is_dir() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < need:
        return False, (f"{model} absent and only {free / 2**30:.1f} GiB free on {probe}: "
                       f"the model needs {need / 2**30:.1f} GiB; free space or move "
                       "model_cache_dir")
    room = (f"{need / 2**30:.1f} GiB to download" if need
            else "the model's size is unknown (model_cache_checkpoint_gib)")
    return False, (f"{model} absent ({free / 2**30:.1f} GiB free on {probe}, {room}); "
                   "the provision phase downloads it")


def _check_vocab(cfg: dict[str, Any]) -> tuple[bool, str]:
    vocab = str(cfg.get("vocab_dir") or "")
    if not vocab:
        return True, "the model needs no separate vocabulary"
    try:
        files = [f for f in Path(vocab).iterdir() if f.is_file()]
    except OSError as exc:
        return False, f"cannot read {vocab}: {exc.strerror}"
    if not files:
        return False, f"no vocabulary file in {vocab}"
    return True, f"{vocab}: {len(files)} file(s)"


#: AWS's workaround where the host has no EFA (prefixbench.hosts.efa: the server fails
#: to start without it, deploy/environments/quickstart-deploy-dlc.rst at v2.32.0).
EFA_SKIP_VAR = "NEURON_SKIP_EFA_AFFINITY"


def _check_efa(cfg: dict[str, Any]) -> tuple[bool, str]:
    root = str(cfg.get("efa_dir") or "")
    if not root:
        return True, "no EFA needed"
    entries = sorted(Path(root).iterdir()) if Path(root).is_dir() else []
    links = [(e.name, e / "device" / "driver") for e in entries]
    efa = [name for name, link in links if link.exists() and link.resolve().name == "efa"]
    if efa:
        return True, f"{len(efa)} EFA device(s): {', '.join(efa)}"
    skip = os.environ.get(EFA_SKIP_VAR, "")
    if skip == "1":
        return True, f"no EFA device under {root}; the unit sets {EFA_SKIP_VAR}=1"
    return False, (f"no EFA device under {root} and the unit does not set "
                   f"{EFA_SKIP_VAR}=1 ({EFA_SKIP_VAR}={skip!r}): the server fails to start")


#: The smallest thing that opens a NeuronCore, no model and no compile: AWS's own
#: skeleton of a libnrt application, ``nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "")`` then
#: ``nrt_close()`` (aws-neuron/aws-neuron-sdk@v2.31.1 and @v2.32.0
#: neuron-runtime/guides/nrt-developer-guide.rst, "Initialization and cleanup";
#: NRT_FRAMEWORK_TYPE_NO_FW = 1 in neuron-runtime/api/nrt.rst). libnrt is loaded by name,
#: so through the unit's LD_LIBRARY_PATH; nrt_init claims NEURON_RT_NUM_CORES cores
#: (one) exclusively and fails when they are held ("Runtime configuration" there).
NEURON_RUNTIME = r"""
import ctypes, os, sys
if not os.environ.get("NEURON_RT_VISIBLE_CORES"):
    os.environ["NEURON_RT_NUM_CORES"] = "1"
lib = None
for name in ("libnrt.so.1", "libnrt.so"):
    try:
        lib = ctypes.CDLL(name)
        break
    except OSError as exc:
        err = str(exc)
if lib is None:
    print("libnrt not loadable with LD_LIBRARY_PATH=" + os.environ.get("LD_LIBRARY_PATH", "")
          + ": " + err, file=sys.stderr)
    sys.exit(2)
lib.nrt_init.restype = ctypes.c_int
status = lib.nrt_init(1, b"", b"")
if status != 0:
    print("nrt_init returned NRT status %d" % status, file=sys.stderr)
    sys.exit(3)
lib.nrt_close()
print("nrt_init and nrt_close on one NeuronCore")
"""
#: The cpu platform's equivalent (the simulated fleet): torch runs an operation and
#: vLLM's platform detection says cpu, as the server's engine start does.
CPU_RUNTIME = r"""
import torch
torch.ones(4).add_(1)
from vllm.platforms import current_platform
name = current_platform.device_name
if name != "cpu":
    raise SystemExit("vLLM's platform is %r, not cpu" % name)
print("torch %s and vLLM's cpu platform" % torch.__version__)
"""
#: NRT status codes (nrt-developer-guide.rst at v2.32.0, "NRT_STATUS") a failing
#: nrt_init may return, named in the check's detail.
NRT_STATUS = {1: "NRT_FAILURE", 2: "NRT_INVALID", 4: "NRT_RESOURCE", 5: "NRT_TIMEOUT",
              6: "NRT_HW_ERROR", 9: "NRT_LOAD_NOT_ENOUGH_NC"}


def _check_runtime(cfg: dict[str, Any]) -> tuple[bool, str]:
    platform = str(cfg.get("runtime") or "")
    if not platform:
        return True, "no runtime to start"
    code = NEURON_RUNTIME if platform == "neuron" else CPU_RUNTIME
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=int(cfg.get("runtime_timeout") or 300), check=False)
    except subprocess.TimeoutExpired as exc:
        return False, f"the runtime did not start within {exc.timeout:.0f} s"
    if proc.returncode == 0:
        return True, proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "ok"
    tail = " | ".join((proc.stderr.strip() or proc.stdout.strip()).splitlines()[-3:])
    for code_num, name in NRT_STATUS.items():
        tail = tail.replace(f"NRT status {code_num}", f"NRT status {code_num} ({name})")
    return False, f"exit {proc.returncode}: {tail[-500:]}"


CHECKS = {
    "imports": _check_imports, "compiler": _check_compiler, "devices": _check_devices,
    "cache": _check_cache, "open_files": _check_nofile, "model": _check_model,
    "vocabulary": _check_vocab, "efa": _check_efa, "runtime": _check_runtime,
}


def _neuron_ls(cfg: dict[str, Any]) -> str:
    exe = str(cfg.get("neuron_ls") or "")
    if not exe or not Path(exe).exists():
        return ""
    try:
        proc = subprocess.run([exe, "-j"], capture_output=True, text=True, timeout=60,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"error: {exc}"
    return proc.stdout if proc.returncode == 0 else f"error: {proc.stderr.strip()[-300:]}"


def main(argv: list[str]) -> int:
    cfg = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    only = set(cfg.get("only") or CHECKS)
    out: dict[str, Any] = {}
    for name, check in CHECKS.items():
        if name not in only or (name == "efa" and not cfg.get("efa_dir")):
            continue  # EFA matters on Neuron alone
        try:
            ok, detail = check(cfg)
        except Exception as exc:  # noqa: BLE001 - a crashing check is a failed one
            ok, detail = False, f"{type(exc).__name__}: {exc}"
        out[name] = {"ok": ok, "detail": detail}
    if "devices" in only:
        out["neuron_ls"] = _neuron_ls(cfg)
    print("PREFIXBENCH-DOCTOR " + json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
