"""The OpenAI front over a router of two instances, on the real server: a client that hangs up
is stopped although Triton may hand the front's stop request to the *other* router instance --
the front repeats its stop until the stream ends (docs/openai.md), and no KV stays held."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES, serve_reference
from e2e_client import hang_up_mid_stream, metric, wait_for

pytestmark = [pytest.mark.triton, pytest.mark.slow]

MODEL = "pdtrt/tiny-llama"


@pytest.fixture(scope="module")
def two_routers(reference_engines, tmp_path_factory):
    from pdtrt.front.options import FrontOptions
    from pdtrt.front.server import FrontServer

    root, _dep = reference_engines
    work = tmp_path_factory.mktemp("two-routers")
    text = (EXAMPLES / "reference-cpu.yaml").read_text()
    assert "\nrouter:\n  instances: 1\n" in text
    spec = work / "spec.yaml"
    spec.write_text(text.replace("\nrouter:\n  instances: 1\n", "\nrouter:\n  instances: 2\n"))
    server, prepared = serve_reference(spec, root, work / "serve")
    front = FrontServer(FrontOptions(repository=prepared.repository,
                                     grpc_url=server.endpoints.grpc_url))
    url = front.start()
    yield server, prepared, url
    front.stop()
    server.stop()


def test_clients_that_hang_up_are_stopped_whichever_instance_gets_the_stop(two_routers):
    server, prepared, front = two_routers
    metrics = server.endpoints.metrics_url
    assert (prepared.repository / "router" / "config.pbtxt").read_text().count("count: 2") == 1
    for attempt in range(4):  # stops land on either instance; each hang-up must end its decode
        want = metric(metrics, "pdtrt_engine_cancelled_total", model="decode") + 1
        hang_up_mid_stream(front, MODEL)
        assert wait_for(lambda want=want: metric(metrics, "pdtrt_engine_cancelled_total",
                                                 model="decode") == want,
                        timeout_s=30), f"hang-up {attempt}"
        assert wait_for(lambda: metric(metrics, "pdtrt_engine_active_sequences",
                                       model="decode") == 0)
        assert wait_for(lambda: metric(metrics, "pdtrt_kv_held_buffers", model="prefill") == 0)
