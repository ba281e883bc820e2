"""The trtllm-0.21 launch across two hosts: placement, environment, and what launch.sh runs.

``launch.sh`` is executed here with fake ``docker``, ``mpirun`` and ``ssh`` first on ``PATH``
that record their arguments, so the test sees the exact command each host would run.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pdtrt import envvars
from pdtrt.enums import Phase
from pdtrt.repo.generate import RepoMode, generate_repo
from pdtrt.repo.plan import plan_repo
from pdtrt.spec.load import load_deployment, parse_spec
from tests.conftest import EXAMPLES
from tests.recorders import install_recorders, run_recorded

SEED = EXAMPLES / "llama3-8b-h100-l40s-trtllm-0.21.yaml"


@pytest.fixture(scope="module")
def llama():
    return load_deployment(SEED)


def test_ranks_are_placed_on_the_host_of_their_gpu_type(llama, tmp_path):
    launch = plan_repo(llama, mode=RepoMode.BOTH, engines_root=tmp_path).launch
    h100, l40s = launch.hosts
    assert (h100.gpu, h100.ranks, h100.models, h100.num_gpus, h100.launcher) == (
        "h100-sxm", (0, 1, 4), ("prefill", "aggregated"), 2, True)
    assert (l40s.gpu, l40s.ranks, l40s.models, l40s.num_gpus, l40s.launcher) == (
        "l40s", (2, 3), ("decode",), 2, False)
    assert launch.rank_hosts == (0, 0, 1, 1, 0)
    assert (h100.host_var, l40s.interface_var) == ("PDTRT_HOST_H100_SXM",
                                                   "PDTRT_UCX_INTERFACE_L40S")
    assert launch.start_order == (l40s, h100)
    assert launch.worker_mounts == (str(tmp_path / "llama3-8b-h100-l40s-trtllm-0.21"),)


def test_one_gpu_type_is_one_host(tmp_path):
    text = SEED.read_text().replace("gpu: l40s", "gpu: h100-sxm")
    spec = tmp_path / "one-host.yaml"
    spec.write_text(text)
    launch = plan_repo(load_deployment(spec), mode=RepoMode.BOTH,
                       engines_root=tmp_path).launch
    [host] = launch.hosts
    assert (host.ranks, host.num_gpus, host.host_var, launch.multi_host) == (
        (0, 1, 2, 3, 4), 4, "", False)
    assert launch.rank_plan("decode").gpu_device_ids_param == "1;2"  # after prefill's GPU 0
    assert launch.launcher_env == (envvars.PDTRT_SRC,) and launch.worker_env == ()


def _fakes(tmp_path: Path) -> dict[str, str]:
    return install_recorders(tmp_path, ("docker", "mpirun", "ssh"))


_run = run_recorded


def _contexts(argv: list[str]) -> list[list[str]]:
    """mpirun's app contexts (split on ':'), each from its ``-n``."""
    start = argv.index("-n")
    contexts, current = [], []
    for arg in argv[start:]:
        if arg == ":":
            contexts.append(current)
            current = []
        else:
            current.append(arg)
    return [*contexts, current]


def test_mpirun_places_every_rank_and_forwards_the_environment(llama, tmp_path):
    repo = tmp_path / "repo"
    generate_repo(llama, repo, mode=RepoMode.BOTH, engines_root=tmp_path / "engines")
    launch = plan_repo(llama, mode=RepoMode.BOTH, engines_root=tmp_path / "engines").launch
    env = {**_fakes(tmp_path), "PDTRT_HOST_H100_SXM": "h100-node", "PDTRT_HOST_L40S": "l40s-node",
           "PDTRT_UCX_INTERFACE_L40S": "enp65s0"}
    argv = _run(repo / "launch.sh", ["--in-container"], env, "mpirun")
    assert argv[:6] == ["--allow-run-as-root", "--bind-to", "none", "--mca", "plm_rsh_args",
                        "-p 2222 -i /opt/pdtrt-ssh/id_ed25519 -o StrictHostKeyChecking=no "
                        "-o UserKnownHostsFile=/dev/null"]
    contexts = _contexts(argv)
    assert len(contexts) == launch.world_size
    pdtrt_env = [line.split("=")[0] for line in (repo / "pdtrt.env").read_text().splitlines()
                 if line and not line.startswith("#")]
    hosts = {0: "h100-node:3", 1: "l40s-node:2"}
    nics = {0: "TRTLLM_UCX_INTERFACE=", 1: "TRTLLM_UCX_INTERFACE=enp65s0"}
    for rank, ctx in enumerate(contexts):
        host = launch.rank_hosts[rank]
        assert ctx[:4] == ["-n", "1", "--host", hosts[host]], rank
        forwarded = [ctx[i + 1] for i, a in enumerate(ctx) if a == "-x"]
        assert forwarded == [*pdtrt_env, "PATH", "LD_LIBRARY_PATH", "PYTHONPATH", nics[host]]
        assert ctx[ctx.index("tritonserver") - 1] == nics[host]
        assert f"--model-repository={repo}" in ctx
    assert "--load-model=decode" in contexts[2] and "--load-model=prefill" in contexts[2]


def test_what_each_host_starts(llama, tmp_path):
    repo = tmp_path / "repo"
    engines = tmp_path / "engines"
    generate_repo(llama, repo, mode=RepoMode.DISAGGREGATED, engines_root=engines)
    env = {**_fakes(tmp_path), "PDTRT_SSH_DIR": "/keys"}
    worker = _run(repo / "launch.sh", ["--worker"], env, "docker")
    assert worker[:3] == ["run", "--rm", "--gpus"] and "--net" in worker
    assert worker[-2:] == [str(repo / "launch.sh"), "--worker-in-container"]
    mounts = [worker[i + 1] for i, a in enumerate(worker) if a == "-v"]
    assert mounts == ["/keys:/opt/pdtrt-ssh:ro", f"{repo}:{repo}:ro",
                      f"{engines}/llama3-8b-h100-l40s-trtllm-0.21:{engines}/llama3-8b-h100-l40s-trtllm-0.21:ro"]
    missing = subprocess.run(["bash", str(repo / "launch.sh")], env=env, capture_output=True,
                             text=True, timeout=60)
    assert missing.returncode != 0 and "PDTRT_SRC: set PDTRT_SRC (see docs/repo.md)" in \
        missing.stderr
    env.update(PDTRT_SRC="/src", PDTRT_HOST_H100_SXM="a", PDTRT_HOST_L40S="b")
    # the example defers the NIC to launch (kv_transfer.interface_at_launch): required then
    no_nic = subprocess.run(["bash", str(repo / "launch.sh")], env=env, capture_output=True,
                            text=True, timeout=60)
    assert no_nic.returncode != 0 and "set PDTRT_UCX_INTERFACE_H100_SXM to the NIC" in \
        no_nic.stderr
    env.update(PDTRT_UCX_INTERFACE_H100_SXM="ib0", PDTRT_UCX_INTERFACE_L40S="ib1")
    launcher = _run(repo / "launch.sh", [], env, "docker")
    assert launcher[-2:] == [str(repo / "launch.sh"), "--in-container"]
    passed = [launcher[i + 1] for i, a in enumerate(launcher) if a == "-e"]
    assert passed == ["PYTHONPATH=/opt/pdtrt-src", "PDTRT_MPI_ARGS=", "PDTRT_HOST_H100_SXM=a",
                      "PDTRT_HOST_L40S=b", "PDTRT_UCX_INTERFACE_H100_SXM=ib0",
                      "PDTRT_UCX_INTERFACE_L40S=ib1", "PDTRT_SSH_PORT="]


def test_launch_env_variables_are_all_listed(llama, tmp_path):
    launch = plan_repo(llama, mode=RepoMode.BOTH, engines_root=tmp_path).launch
    for name in (*launch.launcher_env, *launch.worker_env):
        assert name in envvars.LAUNCH_SCRIPT_READS or name.startswith(
            envvars.LAUNCH_SCRIPT_READS_PER_HOST), name
    assert set(launch.forwarded_env) - {"PATH", "LD_LIBRARY_PATH", "PYTHONPATH"} <= set(
        envvars.WRITTEN)


def test_parse_spec_only_placement():
    from pdtrt.targets.trtllm_launch import EnginePlacement, plan_launch
    spec, _ = parse_spec(SEED.read_text())
    launch = plan_launch(spec, [
        EnginePlacement(model="prefill", phase=Phase.PREFILL,
                        gpu="h100-sxm", tp=2, pp=1, instances=1),
        EnginePlacement(model="decode", phase=Phase.DECODE,
                        gpu="l40s", tp=1, pp=1, instances=3)],
        image="img", mounts=["/e"])
    assert [h.ranks for h in launch.hosts] == [(0, 1, 2), (3, 4, 5)]
    assert launch.rank_plan("decode").gpu_device_ids_param == "0;1;2"
    assert launch.rank_plan("prefill").participant_ids_param == "1,2"


def test_one_host_runs_every_rank_locally(tmp_path):
    spec = tmp_path / "one-host.yaml"
    spec.write_text(SEED.read_text().replace("gpu: l40s", "gpu: h100-sxm"))
    repo = tmp_path / "repo"
    generate_repo(load_deployment(spec), repo, mode=RepoMode.DISAGGREGATED,
                  engines_root=tmp_path / "engines")
    argv = _run(repo / "launch.sh", ["--in-container"], _fakes(tmp_path), "mpirun")
    assert argv[:3] == ["--allow-run-as-root", "--bind-to", "none"]
    contexts = _contexts(argv)
    assert len(contexts) == 4
    for ctx in contexts:
        assert "--host" not in ctx and ctx[:4] == ["-n", "1", "-x", "TRTLLM_USE_UCX_KVCACHE"]
        assert ctx[ctx.index("tritonserver") - 1] == "TRTLLM_UCX_INTERFACE="
    assert "--worker" not in (repo / "launch.sh").read_text()


def test_one_mpi_world_refuses_pools_that_name_different_nics():
    from pdtrt.errors import RepoError
    from pdtrt.targets.trtllm_launch import ucx_env
    text = (EXAMPLES / "llama3-8b-h100-l40s-trtllm-0.21.yaml").read_text()
    spec, _ = parse_spec(text.replace("  gpu: l40s\n", "  gpu: l40s\n  net_devices: [eth1]\n"))
    with pytest.raises(RepoError, match="one MPI world whose ranks all get one UCX_NET_DEVICES"):
        ucx_env(spec)
