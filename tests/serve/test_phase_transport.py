"""router.phase_transport grpc on the real server: the router calls the phase models of its own
server over that server's gRPC port (the address ``pdtrt serve`` gives it in
PDTRT_SERVER_GRPC_URL) instead of BLS, and the output is the same."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import EXAMPLES, serve_reference
from e2e_client import ensemble_inputs, generate
from supervised_server import stubs_of

pytestmark = [pytest.mark.triton, pytest.mark.slow]

PROMPT = "The keeper lit the lamp on the rock"


@pytest.fixture(scope="module")
def grpc_router(reference_engines, tmp_path_factory):
    root, _dep = reference_engines
    work = tmp_path_factory.mktemp("phase-grpc")
    spec = work / "reference-grpc.yaml"
    text = (EXAMPLES / "reference-cpu.yaml").read_text()
    assert "\nrouter:\n" in text
    spec.write_text(text.replace("\nrouter:\n", "\nrouter:\n  phase_transport: grpc\n", 1))
    server, prepared = serve_reference(spec, root, work / "serve")
    yield server, prepared
    server.stop()


def _connected_ports(pid: int) -> set[int]:
    """Remote TCP ports of the sockets process ``pid`` holds (IPv4 and IPv6)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink()
        except OSError:
            continue
        if str(target).startswith("socket:["):
            inodes.add(str(target)[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes and fields[3] == "01":  # ESTABLISHED
                ports.add(int(fields[2].rsplit(":", 1)[1], 16))
    return ports


def test_the_router_calls_its_own_server_over_grpc_with_the_same_output(grpc_router):
    server, prepared = grpc_router
    url = server.endpoints.grpc_url
    got = generate(url, "ensemble", ensemble_inputs(PROMPT, 12))
    want = generate(url, "ensemble_aggregated", ensemble_inputs(PROMPT, 12))
    assert got.error is None and got.final_seen and got.texts == want.texts
    [router] = stubs_of(prepared.repository, "router")
    assert server.endpoints.grpc_port in _connected_ports(router)  # phase calls over gRPC
