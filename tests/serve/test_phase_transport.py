"""router.phase_transport grpc on the real server: the router calls the phase models of its own
server over that server's gRPC port (the address ``pdtrt serve`` gives it in
PDTRT_SERVER_GRPC_URL) instead of BLS, and the output is the same. The same server has
conditional disaggregation on (router.max_local_prefill_tokens): a short prompt is prefilled by
the decode model itself, with the same output, and each decision is counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import EXAMPLES, serve_reference
from e2e_client import ensemble_inputs, generate, metric, wait_for
from supervised_server import stubs_of

pytestmark = [pytest.mark.triton, pytest.mark.slow]

PROMPT = "The keeper lit the lamp on the rock, and the ships kept off the reef all night"
SHORT = "Hi"
LOCAL_BELOW = 8  # prompts of at most this many tokens are prefilled by the decode model


@pytest.fixture(scope="module")
def grpc_router(reference_engines, tmp_path_factory):
    root, _dep = reference_engines
    work = tmp_path_factory.mktemp("phase-grpc")
    spec = work / "reference-grpc.yaml"
    text = (EXAMPLES / "reference-cpu.yaml").read_text()
    assert "\nrouter:\n" in text
    spec.write_text(text.replace("\nrouter:\n", "\nrouter:\n  phase_transport: grpc\n"
                                 f"  max_local_prefill_tokens: {LOCAL_BELOW}\n", 1))
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


def test_a_short_prompt_is_prefilled_by_the_decode_model_with_the_same_output(grpc_router):
    from transformers import AutoTokenizer

    server, prepared = grpc_router
    url, metrics = server.endpoints.grpc_url, server.endpoints.metrics_url
    manifest = json.loads((prepared.repository / "pdtrt-repo.json").read_text())
    tok = AutoTokenizer.from_pretrained(manifest["tokenizer_dir"], local_files_only=True)
    assert len(tok.encode(SHORT)) <= LOCAL_BELOW < len(tok.encode(PROMPT))

    def counts() -> tuple[float, float, float]:
        return (metric(metrics, "pdtrt_router_prefill_path_total", path="local",
                       reason="short_net_new"),
                metric(metrics, "pdtrt_router_prefill_path_total", path="remote"),
                # the router's calls, not Triton's request count: its background health
                # probes of the prefill model are requests too (a probe in the window failed
                # this test on a loaded machine)
                metric(metrics, "pdtrt_router_endpoint_calls_total", phase="prefill"))

    local, remote, prefills = counts()
    got = generate(url, "ensemble", ensemble_inputs(SHORT, 12))
    want = generate(url, "ensemble_aggregated", ensemble_inputs(SHORT, 12))
    assert got.error is None and got.final_seen and got.texts == want.texts
    # counted as local, and the prefill model was not called
    assert wait_for(lambda: counts()[:2] == (local + 1, remote), timeout_s=5), counts()
    assert counts()[2] == prefills
    generate(url, "ensemble", ensemble_inputs(PROMPT, 4))
    assert wait_for(lambda: counts() == (local + 1, remote + 1, prefills + 1), timeout_s=5), \
        counts()
