"""The trtllm-1.2 launch: one Triton server per host, GPU pinning, and the UCX environment.

``launch.sh`` runs with fake ``docker`` and ``tritonserver`` first on ``PATH`` that record their
arguments (and, for ``tritonserver``, the environment it got), so the test sees the exact
command each host runs -- outside the container and inside it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pdtrt import envvars
from pdtrt.errors import RepoError
from pdtrt.repo.generate import RepoMode, generate_repo
from pdtrt.repo.plan import plan_repo
from pdtrt.spec.load import load_deployment
from tests.conftest import EXAMPLES
from tests.recorders import install_recorders, recorded_calls, run_recorded

SPEC = EXAMPLES / "llama3-8b-h100-l40s.yaml"
@pytest.fixture(scope="module")
def dep():
    return load_deployment(SPEC)


def _fakes(tmp_path: Path) -> dict[str, str]:
    return install_recorders(tmp_path, ("docker", "python3"))


_run = run_recorded


def test_each_pool_is_a_server_on_its_own_host(dep, tmp_path):
    front = plan_repo(dep, mode=RepoMode.BOTH, engines_root=tmp_path).launch
    pools = plan_repo(dep, mode=RepoMode.POOLS, engines_root=tmp_path).launch
    [h100], [l40s] = front.hosts, pools.hosts
    assert (h100.gpu, h100.models, h100.num_gpus, h100.server) == (
        "h100-sxm", ("prefill", "aggregated"), 2, True)
    assert (l40s.gpu, l40s.models, l40s.num_gpus) == ("l40s", ("decode",), 2)
    assert not front.mpi and front.world_size == 1
    assert front.rank_plan("aggregated").gpu_device_ids_param == "1"  # after prefill's GPU 0
    assert pools.rank_plan("decode").gpu_device_ids_param == "0;1"  # one GPU per instance
    # self,sm: Open MPI's UCX layer (the LLM API's MPI workers) reads the same UCX_TLS;
    # one rail per transfer with tcp (UCX's default 2 spreads it over docker0 too)
    assert dict(pools.env) == {"UCX_TLS": "rc,cuda_copy,tcp,self,sm", "UCX_MEMTYPE_CACHE": "n",
                               "UCX_MAX_RNDV_RAILS": "1"}
    assert set(dict(pools.env_reasons)) == set(dict(pools.env))  # each says why
    assert set(dict(pools.env)) <= set(envvars.WRITTEN)
    assert pools.launcher_env == (envvars.PDTRT_SRC,)
    assert l40s.interface_var.startswith(envvars.PDTRT_UCX_INTERFACE_PREFIX)


def _edited(tmp_path: Path, name: str, old: str, new: str) -> Path:
    """The example spec with ``old`` replaced by ``new``, written as ``name``."""
    spec = tmp_path / name
    spec.write_text(SPEC.read_text().replace(old, new))
    return spec


def test_two_gpu_types_in_one_server_are_refused(tmp_path):
    spec = _edited(tmp_path, "one-repo.yaml", "  endpoint: l40s-host:8001 ", "  # no endpoint ")
    with pytest.raises(RepoError) as err:
        plan_repo(load_deployment(spec), mode=RepoMode.BOTH, engines_root=tmp_path)
    assert err.value.message == (
        "a trtllm-1.2 repository is one Triton server on one host, but its engine models need "
        "2 GPU types (prefill on h100-sxm, decode on l40s, aggregated on h100-sxm)")
    assert "--mode pools" in (err.value.hint or "")


def test_what_the_l40s_host_runs(dep, tmp_path):
    repo, engines = tmp_path / "repo", tmp_path / "engines"
    generate_repo(dep, repo, mode=RepoMode.POOLS, engines_root=engines)
    env = {**_fakes(tmp_path), "PDTRT_SRC": "/src", "PDTRT_UCX_INTERFACE_L40S": "ib0",
           "HF_HOME": "/hf"}
    docker = _run(repo / "launch.sh", ["--openai-port", "8080"], env, "docker")
    image = _image(repo)
    # the image is looked for first (the fake has it: no build), then run
    inspect, run = recorded_calls(env, "docker")
    assert inspect == ["image", "inspect", image] and run == docker
    assert docker[:4] == ["run", "--rm", "--gpus", '"device=0,1"']
    # the serving image, the script itself in the container, pdtrt serve's options after it
    assert docker[-5:] == [image, str(repo / "launch.sh"), "--in-container", "--openai-port",
                           "8080"]
    passed = [docker[i + 1] for i, a in enumerate(docker) if a == "-e"]
    # the model is a Hub name: the launcher's token (when set) and its HF cache go in
    workdir = f"{repo}.run"
    assert passed == ["PYTHONPATH=/opt/pdtrt-src", "TRTLLM_UCX_INTERFACE=ib0",
                      f"PDTRT_WORKDIR={workdir}", "PDTRT_OPENAI_PORT",
                      "PDTRT_UCX_NET_DEVICES_L40S", "HF_TOKEN", "HF_HOME=/opt/hf-home"]
    mounts = [docker[i + 1] for i, a in enumerate(docker) if a == "-v"]
    name = dep.spec.name
    assert mounts == ["/hf:/opt/hf-home", "/src:/opt/pdtrt-src:ro", f"{repo}:{repo}:ro",
                      f"{workdir}:{workdir}", f"{engines}/{name}:{engines}/{name}:ro"]
    assert Path(workdir).is_dir()  # made by the launcher: the server's log and state
    assert docker[docker.index("--env-file") + 1] == f"{repo}/pdtrt.env"


def _reachable_nic() -> str:
    """A network interface of this host that is up, not loopback and has an IPv4 address."""
    import fcntl
    import socket
    import struct

    for nic in sorted(p.name for p in Path("/sys/class/net").iterdir()):
        flags = int((Path("/sys/class/net") / nic / "flags").read_text(), 16)
        try:
            with socket.socket() as s:  # SIOCGIFADDR: its IPv4 address
                fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", nic.encode()[:15]))
        except OSError:
            continue
        if not flags & 0x8:
            return nic
    pytest.skip("this host has no non-loopback interface with an address")


def _image(repo: Path) -> str:
    """The image ``launch.sh`` runs (its ``IMAGE=`` default)."""
    line = next(x for x in (repo / "launch.sh").read_text().splitlines()
                if x.startswith("IMAGE="))
    return line.split(":-", 1)[1].rstrip("}\"")


def test_the_image_is_built_from_the_repositorys_dockerfile_when_missing(dep, tmp_path):
    repo = tmp_path / "repo"
    generate_repo(dep, repo, mode=RepoMode.POOLS, engines_root=tmp_path / "engines")
    env = {**_fakes(tmp_path), "PDTRT_SRC": "/src", "PDTRT_UCX_INTERFACE_L40S": "ib0",
           "HF_HOME": "/hf"}
    (tmp_path / "bin" / "docker").write_text(  # no image yet: inspect fails, build reads stdin
        '#!/bin/sh\nprintf "%s\\0" "$@" "" >> "$RECORD_DIR/docker.calls"\n'
        '[ "$1" = build ] && cat > "$RECORD_DIR/dockerfile"\n[ "$1" != image ]\n')
    done = subprocess.run(["bash", str(repo / "launch.sh")], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    image = _image(repo)
    assert [c[:2] for c in recorded_calls(env, "docker")] == [
        ["image", "inspect"], ["build", "-t"], ["run", "--rm"]]
    assert recorded_calls(env, "docker")[1] == ["build", "-t", image, "-"]
    recipe = (tmp_path / "record" / "dockerfile").read_text()
    assert recipe == (repo / "Dockerfile").read_text()
    assert "FROM nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3\n" in recipe
    assert '"tritonclient[grpc]==2.71.0"' in recipe
    assert f"building {image} from {repo}/Dockerfile" in done.stderr


def test_inside_the_container_it_runs_preflight_then_pdtrt_serve(dep, tmp_path):
    repo = tmp_path / "repo"
    generate_repo(dep, repo, mode=RepoMode.POOLS, engines_root=tmp_path / "engines")
    nic = _reachable_nic()
    env = {**_fakes(tmp_path), "TRTLLM_UCX_INTERFACE": nic, "PDTRT_WORKDIR": "/work/run"}
    argv = _run(repo / "launch.sh", ["--in-container", "--timeout", "900"], env, "python3")
    check, preflight, serve = recorded_calls(env, "python3")  # the NIC's address, first
    assert check == ["-", nic]
    assert preflight == ["-m", "pdtrt.cli.main", "preflight", str(repo)]
    # the supervisor's server: readiness, reloads and restarts as `pdtrt serve` on the CPU;
    # NVIDIA's tritonserver where the image has it, pdtrt's embedded one elsewhere (here)
    assert serve == argv == [
        "-m", "pdtrt.cli.main", "serve", str(repo), "--workdir", "/work/run",
        "--host", "0.0.0.0", "--grpc-port", "8001", "--http-port", "8000",
        "--metrics-port", "8002", "--no-openai", "--timeout", "900"]
    got = (tmp_path / "record" / "python3.env").read_text().splitlines()
    assert "UCX_TLS=rc,cuda_copy,tcp,self,sm" in got and "UCX_MEMTYPE_CACHE=n" in got
    assert [line for line in got if line.startswith("TRTLLM_UCX_INTERFACE=")] == [
        f"TRTLLM_UCX_INTERFACE={nic}"]
    env["PDTRT_OPENAI_PORT"] = "8080"
    argv = _run(repo / "launch.sh", ["--in-container"], env, "python3")
    assert argv[-2:] == ["--openai-port", "8080"]


def test_a_failed_preflight_starts_no_server(dep, tmp_path):
    repo = tmp_path / "repo"
    generate_repo(dep, repo, mode=RepoMode.POOLS, engines_root=tmp_path / "engines")
    env = {**_fakes(tmp_path), "TRTLLM_UCX_INTERFACE": _reachable_nic()}
    (tmp_path / "bin" / "python3").write_text(
        '#!/bin/sh\nprintf "%s\\0" "$@" "" >> "$RECORD_DIR/python3.calls"\n'
        'if [ "$3" = preflight ]; then exit 2; fi\n')  # only the preflight fails
    done = subprocess.run(["bash", str(repo / "launch.sh"), "--in-container"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert [c[2] for c in recorded_calls(env, "python3")[1:]] == ["preflight"]


@pytest.mark.parametrize(("nic", "error"), [
    ("lo", "TRTLLM_UCX_INTERFACE=lo is a loopback interface: the other host cannot reach it"),
    ("nosuch0", "TRTLLM_UCX_INTERFACE=nosuch0 names no network interface of this host"),
    ("", "set PDTRT_UCX_INTERFACE_L40S (or kv_transfer.interface in the spec) to the NIC"),
], ids=["loopback", "no-such-nic", "unset"])
def test_the_server_does_not_start_on_an_interface_the_other_host_cannot_reach(
        dep, tmp_path, nic, error):
    repo = tmp_path / "repo"
    generate_repo(dep, repo, mode=RepoMode.POOLS, engines_root=tmp_path / "engines")
    env = {**_fakes(tmp_path), "TRTLLM_UCX_INTERFACE": nic}
    done = subprocess.run(["bash", str(repo / "launch.sh"), "--in-container"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and error in done.stderr, done.stderr
    assert not (Path(env["RECORD_DIR"]) / "python3").exists()  # no preflight, no server


def test_a_two_host_repository_needs_the_interface(tmp_path):
    spec = _edited(tmp_path, "no-nic.yaml", "  interface_at_launch: true ", "  # no interface ")
    with pytest.raises(RepoError) as err:
        plan_repo(load_deployment(spec), mode=RepoMode.POOLS, engines_root=tmp_path)
    assert err.value.message.startswith("kv_transfer.interface is not set, and the KV of this "
                                        "deployment crosses hosts")
    assert "interface_at_launch" in (err.value.hint or "")
    named = _edited(tmp_path, "nic.yaml", "  interface_at_launch: true ", "  interface: ib0\n  #")
    repo = tmp_path / "repo"
    generate_repo(load_deployment(named), repo, mode=RepoMode.POOLS, engines_root=tmp_path)
    docker = _run(repo / "launch.sh", [], {**_fakes(tmp_path), "PDTRT_SRC": "/src",
                                             "HOME": str(tmp_path)}, "docker")
    passed = [docker[i + 1] for i, a in enumerate(docker) if a == "-e"]
    assert "TRTLLM_UCX_INTERFACE=ib0" in passed  # the spec's, unless the host says otherwise
    # rc: the RDMA devices only where the host has them (this one has not: warned, tcp used)
    assert ("--device=/dev/infiniband" in docker) == Path("/dev/infiniband").exists()


def test_pdtrt_env_says_why_each_variable_has_its_value(dep, tmp_path):
    repo = tmp_path / "repo"
    generate_repo(dep, repo, mode=RepoMode.POOLS, engines_root=tmp_path / "engines")
    lines = (repo / "pdtrt.env").read_text().splitlines()
    i = lines.index("UCX_TLS=rc,cuda_copy,tcp,self,sm")
    assert lines[i - 1].startswith("# kv_transfer.transports, plus self and sm")
    assert lines[lines.index("UCX_MAX_RNDV_RAILS=1") - 1].startswith("# one NIC per transfer")


def _launcher(tmp_path: Path, spec: Path, gpus: int | None) -> subprocess.CompletedProcess:
    """Run the L40S host's launch.sh with fake docker (and nvidia-smi listing ``gpus``)."""
    repo = tmp_path / "repo"
    generate_repo(load_deployment(spec), repo, mode=RepoMode.POOLS,
                  engines_root=tmp_path / "engines")
    env = {**install_recorders(tmp_path, ("docker",)), "PDTRT_SRC": "/src", "HOME": "/h",
           "PDTRT_UCX_INTERFACE_L40S": "ib0", "PDTRT_UCX_NET_DEVICES_L40S": "mlx5_2:1"}
    if gpus is not None:
        smi = tmp_path / "bin" / "nvidia-smi"
        smi.write_text("#!/bin/sh\n" + "".join(f"echo 'GPU {i}: NVIDIA L40S (UUID: x)'\n"
                                              for i in range(gpus)))
        smi.chmod(0o755)
    return subprocess.run(["bash", str(repo / "launch.sh")], env=env, capture_output=True,
                          text=True, timeout=60)


def test_too_few_gpus_are_refused_before_docker_runs(tmp_path):
    done = _launcher(tmp_path, SPEC, gpus=1)
    assert done.returncode == 2
    assert ("launch.sh: this repository needs 2 GPU(s) on this host (decode: GPU 0;1), "
            "nvidia-smi lists 1; regenerate it with fewer instances in the spec, or run it on "
            "a host with 2") in done.stderr
    assert not (tmp_path / "record" / "docker").exists()
    (tmp_path / "two").mkdir()
    ok = _launcher(tmp_path / "two", SPEC, gpus=2)
    assert ok.returncode == 0, ok.stderr
    # this host's NICs for UCX go in, for the container to export as UCX_NET_DEVICES
    docker = (tmp_path / "two" / "record" / "docker").read_text().split("\0")
    assert "PDTRT_UCX_NET_DEVICES_L40S" in docker


@pytest.mark.skipif(Path("/dev/infiniband").exists(), reason="this host has RDMA devices")
def test_rdma_without_the_devices_is_warned_or_refused(tmp_path):
    done = _launcher(tmp_path, SPEC, gpus=None)  # rc, cuda_copy, tcp: tcp carries the KV
    assert done.returncode == 0, done.stderr
    assert "no /dev/infiniband: starting without it, the KV moves over tcp" in done.stderr
    docker = (tmp_path / "record" / "docker").read_text().split("\0")
    assert "--device=/dev/infiniband" not in docker and "--cap-add=IPC_LOCK" not in docker
    (tmp_path / "rc").mkdir()
    rc_only = _edited(tmp_path / "rc", "rc.yaml", "transports: [rc, cuda_copy, tcp]",
                      "transports: [rc, cuda_copy]")
    done = _launcher(tmp_path / "rc", rc_only, gpus=None)
    assert done.returncode == 2
    assert ("but this host has no /dev/infiniband, and no tcp to fall back on: the KV could "
            "not cross hosts") in done.stderr
    assert not (tmp_path / "rc" / "record" / "docker").exists()


def test_each_host_gets_its_pools_net_devices(tmp_path):
    spec = _edited(tmp_path, "nics.yaml", "  net_devices: []  ",
                   "  net_devices: [mlx5_0:1]")
    spec.write_text(spec.read_text().replace(
        "  gpu: l40s\n", "  gpu: l40s\n  net_devices: [mlx5_2:1]\n"))
    dep = load_deployment(spec)
    front = plan_repo(dep, mode=RepoMode.BOTH, engines_root=tmp_path).launch
    pools = plan_repo(dep, mode=RepoMode.POOLS, engines_root=tmp_path).launch
    assert dict(front.env)["UCX_NET_DEVICES"] == "mlx5_0:1"  # the H100 host: the default
    assert dict(pools.env)["UCX_NET_DEVICES"] == "mlx5_2:1"  # the L40S host: decode's own
    assert dict(pools.env_reasons)["UCX_NET_DEVICES"].startswith(
        "decode.net_devices; PDTRT_UCX_NET_DEVICES_L40S replaces it")
    assert dict(front.env_reasons)["UCX_NET_DEVICES"].startswith("kv_transfer.net_devices")


def _shared_spec(tmp_path: Path, prefill: float | None = 0.3, decode: float | None = 0.3
                 ) -> Path:
    """The example on one host: both pools on the H100, sharing its GPU."""
    spec = _edited(tmp_path, "shared.yaml", "  endpoint: l40s-host:8001 ", "  # no endpoint ")
    text = spec.read_text().replace("  gpu: l40s\n", "  gpu: h100-sxm\n")
    text = text.replace("serving:\n", "serving:\n  share_gpus: true\n")
    for pool, fraction in (("prefill", prefill), ("decode", decode)):
        if fraction is not None:  # first key under the pool's engine:
            i = text.index(f"\n{pool}:")
            j = text.index("  engine:\n", i) + len("  engine:\n")
            text = text[:j] + f"    kv_cache_free_gpu_mem_fraction: {fraction}\n" + text[j:]
    spec.write_text(text)
    return spec


def test_shared_gpus_put_every_instance_on_gpu_0(tmp_path):
    dep = load_deployment(_shared_spec(tmp_path))
    launch = plan_repo(dep, mode=RepoMode.DISAGGREGATED, engines_root=tmp_path).launch
    [host] = launch.hosts
    assert host.num_gpus == 1  # docker run --gpus device=0; nvidia-smi must list one
    assert launch.rank_plan("prefill").gpu_device_ids_param == "0"
    assert launch.rank_plan("decode").gpu_device_ids_param == "0;0"  # both instances
    with pytest.raises(RepoError) as err:  # the baseline takes prefill's 0.3 again: no room
        plan_repo(dep, mode=RepoMode.BOTH, engines_root=tmp_path)
    assert "prefill 0.3 + decode 0.6 + aggregated 0.3 = 1.2" in err.value.message
    assert "--mode disaggregated and --mode aggregated one after the other" in err.value.hint


def test_shared_gpus_need_fractions_that_leave_room(tmp_path):
    from pdtrt.errors import SpecError
    with pytest.raises(SpecError) as err:
        load_deployment(_shared_spec(tmp_path, prefill=None, decode=0.7))
    paths = [i.path for i in err.value.issues]
    assert paths == ["prefill.engine.kv_cache_free_gpu_mem_fraction",
                     "decode.engine.kv_cache_free_gpu_mem_fraction"]
    assert "at most 0.9" in err.value.issues[1].message
