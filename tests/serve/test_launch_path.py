"""The launch path of a GPU host, run to readiness on this CPU machine.

What a trtllm-1.2 ``launch.sh`` does inside its container -- source ``pdtrt.env``, check the
NIC, ``pdtrt preflight``, then ``pdtrt serve`` on the repository -- depends only on the
repository it sits in. Here the generated script (the flagship's L40S host, ``--mode pools``)
is put into the reference target's repository (``reference-cpu.yaml``, ``--mode both``), whose
models run on the CPU, and run as ``launch.sh --in-container``: the embedded Triton (there is no
``/opt/tritonserver`` here), the supervisor, and readiness at ``/v2/models/health/ready`` --
the marker the supervisor loads only while every phase has a healthy endpoint.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from pdtrt.engine_io import READINESS_PATH
from pdtrt.facts.embedded_triton import find_embedded_triton
from pdtrt.repo.generate import RepoMode, generate_repo
from pdtrt.serve.triton_server import free_port
from pdtrt.spec.load import load_deployment
from tests.conftest import EXAMPLES, ROOT
from tests.repo.test_launch_trtllm_1_2 import _reachable_nic

pytestmark = [pytest.mark.triton, pytest.mark.slow]


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def test_launch_sh_in_the_container_reaches_readiness_under_the_supervisor(
        reference_engines, tmp_path):
    import importlib.util

    if find_embedded_triton() is None or importlib.util.find_spec("ucxx") is None:
        pytest.skip("needs the embedded Triton server (nvidia-pytriton) and ucxx")
    engines, dep = reference_engines
    repo, flagship = tmp_path / "repo", tmp_path / "flagship"
    generate_repo(dep, repo, mode=RepoMode.BOTH, engines_root=engines)
    generate_repo(load_deployment(EXAMPLES / "llama3-8b-h100-l40s.yaml"), flagship,
                  mode=RepoMode.POOLS, engines_root=tmp_path / "gpu-engines")
    for name in ("launch.sh", "pdtrt.env"):
        shutil.copy2(flagship / name, repo / name)
    ports = [free_port() for _ in range(3)]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(ROOT), "TRTLLM_UCX_INTERFACE": _reachable_nic(),
           "PDTRT_WORKDIR": str(tmp_path / "work")}
    args = ["--host", "127.0.0.1", "--grpc-port", str(ports[0]), "--http-port", str(ports[1]),
            "--metrics-port", str(ports[2]), "--timeout", "400"]
    log = open(tmp_path / "launch.log", "wb")  # noqa: SIM115 -- closed below
    proc = subprocess.Popen(["bash", str(repo / "launch.sh"), "--in-container", *args],
                            env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    readiness = f"http://127.0.0.1:{ports[1]}{READINESS_PATH}"
    try:
        deadline = time.monotonic() + 480
        while not _ready(readiness):
            assert proc.poll() is None, (tmp_path / "launch.log").read_text()[-4000:]
            assert time.monotonic() < deadline, (tmp_path / "launch.log").read_text()[-4000:]
            time.sleep(1)
        text = (tmp_path / "launch.log").read_text()
        assert "preflight: ok" in text  # the preflight ran first and passed
        assert f"readiness: {readiness}" in text  # pdtrt serve's, not a bare tritonserver
        assert (tmp_path / "work" / "server.log").is_file()  # the workdir launch.sh named
    finally:
        proc.send_signal(signal.SIGTERM)  # pdtrt serve stops its server and stubs
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    assert proc.returncode == 0, (tmp_path / "launch.log").read_text()[-4000:]
