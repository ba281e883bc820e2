"""Two hosts on a real network: the prefill pool on one, the front and decode on the other.

Two network namespaces joined by a veth pair (``tests/netns.py``) stand in for the H100 host
and the L40S host. Host ``a`` runs ``pdtrt serve SPEC --mode pools`` (the prefill pool, on
its endpoint ``198.18.0.1:PORT``); host ``b`` runs ``pdtrt serve SPEC`` (ensemble, router,
decode, aggregated baseline). Every request crosses the link twice: gRPC from b's router to
a's prefill, and the KV cache from a's prefill to b's decode over UCX on TCP
(``kv_transfer: {transports: [tcp], net_devices: [pdtrt0]}``) -- not shared memory, which
cannot cross hosts. The session's one-server deployment is the oracle for the tokens.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import EXAMPLES, TESTS
from e2e_client import ensemble_inputs, generate
from netns import DEVICE, Host, two_hosts, unavailable_reason

pytestmark = [pytest.mark.triton, pytest.mark.slow]

PDTRT = str(Path(sys.executable).with_name("pdtrt"))  # the console script of this venv
PREFILL_PORT = 18001  # inside host a's own namespace: nothing else listens there
PROMPT = " ".join(["The keeper lit the lamp on the rock"] * 12)


def _pdtrt(host: Host, *args: str, timeout_s: float = 300) -> dict:
    out = subprocess.run(host.argv(PDTRT, *args, "--json"),
                         capture_output=True, text=True, timeout=timeout_s)
    assert out.returncode == 0, f"pdtrt {' '.join(args)} on {host.ns}: {out.stderr}{out.stdout}"
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def hosts():
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    with two_hosts("2h") as pair:
        yield pair


@pytest.fixture(scope="module")
def spec(hosts, tmp_path_factory):
    a, _b = hosts
    data = yaml.safe_load((EXAMPLES / "reference-remote.yaml").read_text())
    data["prefill"]["endpoint"] = f"{a.address}:{PREFILL_PORT}"
    del data["decode"]["endpoint"]  # decode is served by the front, on host b
    data["kv_transfer"].update(transports=["tcp"], net_devices=[DEVICE])
    path = tmp_path_factory.mktemp("two-hosts") / "two-hosts.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _serve_pools(a: Host, spec, root, workdir) -> dict:
    return _pdtrt(a, "serve", str(spec), "--mode", "pools", "--host", a.address,
                  "--engines-dir", str(root), "--workdir", str(workdir), "--detach")


@pytest.fixture(scope="module")
def servers(hosts, spec, reference_engines, reference_server, tmp_path_factory):
    """(pools info, front info, pools workdir); both servers stopped at the end."""
    a, b = hosts
    root, _dep = reference_engines
    work = tmp_path_factory.mktemp("two-hosts-servers")
    started: list[str] = []
    try:
        pools = _serve_pools(a, spec, root, work / "a")
        started.append(str(work / "a"))
        front = _pdtrt(b, "serve", str(spec), "--engines-dir", str(root), "--workdir",
                       str(work / "b"), "--detach")
        started.append(str(work / "b"))
        yield pools, front, work / "a"
    finally:
        for workdir in reversed(started):  # pdtrt stop kills by PID: works from any namespace
            subprocess.run([PDTRT, "stop", workdir],
                           capture_output=True, timeout=60)


def _ask(b: Host, front: dict, prompts: list[str], max_tokens: int) -> dict:
    endpoints = front["endpoints"]
    out = subprocess.run(b.argv(sys.executable, str(TESTS / "netns_client.py"),
                                endpoints["grpc"], endpoints["metrics"],
                                str(max_tokens), *prompts),
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _oracle(reference_server, prompt: str, max_tokens: int) -> list[str]:
    server, _ = reference_server
    out = generate(server.endpoints.grpc_url, "ensemble", ensemble_inputs(prompt, max_tokens))
    assert out.error is None
    return out.texts


def test_the_pools_listen_on_host_a_and_the_front_on_host_b(hosts, servers):
    a, _b = hosts
    pools, front, _ = servers
    assert pools["endpoints"]["grpc"] == f"{a.address}:{PREFILL_PORT}"
    assert front["endpoints"]["grpc"].startswith("127.0.0.1:")  # b's own loopback


def test_same_tokens_and_the_kv_crosses_the_link(hosts, servers, reference_server):
    a, b = hosts
    _pools, front, _ = servers
    rx_before, tx_before = a.link_bytes()
    kv_before = _ask(b, front, [], 1)["kv_bytes"]
    got = _ask(b, front, [PROMPT], 8)
    (result,) = got["results"]
    assert result["error"] is None and result["final"]
    assert result["texts"] == _oracle(reference_server, PROMPT, 8)
    kv_bytes = got["kv_bytes"] - kv_before
    rx_after, tx_after = a.link_bytes()
    # the KV of a ~100-token prompt is tens of KiB; every byte of it left host a on the link
    assert kv_bytes > 32 * 1024
    assert tx_after - tx_before >= kv_bytes, (tx_after - tx_before, kv_bytes)
    assert rx_after > rx_before  # the router's gRPC call came in over the link


def test_concurrent_streams_across_the_hosts_are_exact(hosts, servers, reference_server):
    _a, b = hosts
    _pools, front, _ = servers
    prompts = [f"Request {i} crosses hosts with item {i * 7}" for i in range(8)]
    got = _ask(b, front, prompts, 6)
    for prompt, result in zip(prompts, got["results"], strict=True):
        assert result["error"] is None, result["error"]
        assert result["texts"] == _oracle(reference_server, prompt, 6)


def test_pools_host_down_is_a_clear_error_and_recovery_follows(hosts, spec, servers,
                                                               reference_engines,
                                                               reference_server):
    a, b = hosts
    _pools, front, pools_workdir = servers
    subprocess.run([PDTRT, "stop", str(pools_workdir)],
                   check=True, capture_output=True, timeout=60)
    started = time.monotonic()
    (down,) = _ask(b, front, ["Is anyone there"], 4)["results"]
    assert time.monotonic() - started < 10
    assert down["error"] is not None and "prefill failed" in down["error"] and \
        f"{a.address}:{PREFILL_PORT}" in down["error"], down
    root, _dep = reference_engines
    _serve_pools(a, spec, root, pools_workdir)
    expected = _oracle(reference_server, "Is anyone there", 4)
    deadline = time.monotonic() + 60  # gRPC reconnect backoff: seconds, not minutes
    while True:
        (back,) = _ask(b, front, ["Is anyone there"], 4)["results"]
        if back["error"] is None or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert back["error"] is None, back["error"]
    assert back["texts"] == expected
