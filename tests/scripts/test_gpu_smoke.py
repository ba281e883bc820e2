"""scripts/gpu_smoke.sh, the first thing to run on a GPU host, with everything a GPU host
has faked: ``nvidia-smi`` lists one GPU, ``docker`` records its calls and, for ``docker run``,
prints a preflight and waits to be stopped; ``curl`` says ready once it runs. No Hub
(offline, a snapshot in the test's cache). What runs for real: the bootstrap, ``pdtrt
doctor``, the spec written for the GPU, ``pdtrt build``, ``pdtrt repo generate``,
``launch.sh`` up to ``docker run``, the stop, and ``pdtrt infer`` -- which finds no server, so
the script must fail there, naming it.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

from tests.buildspecs import make_hub_snapshot
from tests.conftest import ROOT
from tests.recorders import recorded_calls

SCRIPT = ROOT / "scripts" / "gpu_smoke.sh"

_DOCKER = """#!/bin/sh
printf "%s\\0" "$@" "" >> "$RECORD_DIR/docker.calls"
case "$1" in
  image) exit 0 ;;
  run)
    echo "preflight of /repo (trtllm-1.2)"
    echo "versions: python 3.12.3, tensorrt_llm 1.2.1"
    echo "preflight: ok"
    touch "$RECORD_DIR/docker.running"
    trap 'echo stopped > "$RECORD_DIR/docker.stopped"; exit 0' TERM
    while :; do sleep 1; done ;;
esac
"""


def _tool(bin_dir: Path, name: str, text: str) -> None:
    (bin_dir / name).write_text(text)
    (bin_dir / name).chmod(0o755)


def _free_port_base() -> int:
    """An HTTP port whose next two are free as well."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base > 65000:
            continue
        try:
            for port in (base + 1, base + 2):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    bin_dir, record = tmp_path / "bin", tmp_path / "record"
    bin_dir.mkdir()
    record.mkdir()
    _tool(bin_dir, "nvidia-smi", "#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'\n")
    _tool(bin_dir, "docker", _DOCKER)
    # ready once the server runs (after its preflight), as Triton's readiness would be
    _tool(bin_dir, "curl", '#!/bin/sh\ntest -f "$RECORD_DIR/docker.running"\n')
    make_hub_snapshot(tmp_path / "hf" / "hub", "Qwen/Qwen3-0.6B")
    keep = {k: v for k, v in os.environ.items() if k in ("PYTHONPATH", "LANG", "TMPDIR")}
    return {**keep, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "RECORD_DIR": str(record), "HOME": str(tmp_path / "home"),
            "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1",
            "PDTRT_SMOKE_DIR": str(tmp_path / "out"), "PDTRT_SMOKE_GPU": "h100-sxm",
            "PDTRT_SMOKE_PORT": str(_free_port_base()), **extra}


def test_help_teaches_what_it_runs_and_needs():
    done = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0
    assert "first thing to run on a GPU host" in done.stdout
    assert "PDTRT_SMOKE_READY_S" in done.stdout and "set -euo" not in done.stdout


def test_without_docker_it_says_what_a_gpu_host_needs(tmp_path):
    env = _env(tmp_path)
    (tmp_path / "bin" / "docker").unlink()
    path = [p for p in env["PATH"].split(os.pathsep) if not (Path(p) / "docker").exists()]
    done = subprocess.run(["bash", str(SCRIPT)], env={**env, "PATH": os.pathsep.join(path)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert "gpu_smoke: needs docker on PATH" in done.stderr


def test_it_builds_launches_on_gpu_0_stops_and_fails_on_the_unanswered_request(tmp_path):
    env = _env(tmp_path)
    done = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                          timeout=600)
    out = tmp_path / "out"
    assert done.returncode == 2, done.stdout + done.stderr
    # the spec for this GPU: both pools on it, sharing GPU 0
    spec = (out / "gpu-smoke.yaml").read_text()
    assert spec.count("gpu: h100-sxm") == 2 and "share_gpus: true" in spec
    assert (out / "engines" / "gpu-smoke" / "aggregated" / "extra_llm_api_options.yaml").is_file()
    config = (out / "repo-aggregated" / "aggregated" / "config.pbtxt").read_text()
    assert 'key: "gpu_device_ids"' in config
    # launch.sh ran docker on GPU 0 only, the preflight's lines were shown, then it was stopped
    run = next(c for c in recorded_calls(env, "docker") if c[0] == "run")
    assert run[:4] == ["run", "--rm", "--gpus", '"device=0"']
    assert "  versions: python 3.12.3, tensorrt_llm 1.2.1" in done.stdout
    assert (tmp_path / "record" / "docker.stopped").is_file()  # SIGTERM reached docker run
    # nothing answered: the script names the step that failed, and stops there
    assert ("gpu_smoke: aggregated: the request through 'ensemble_aggregated' failed"
            in done.stderr)
    assert not (out / "repo-disaggregated").exists()
