"""KV transfer over real UCX (ucxx) between two processes on this host."""

from __future__ import annotations

import importlib.util
import multiprocessing as mp
import time

import numpy as np
import pytest

from pdtrt.errors import KVTransferError

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ucxx") is None,
                                reason="ucxx (ucxx-cu12) is not installed")


@pytest.fixture(scope="module")
def nodes():
    from pdtrt.llmapi.reference.kv_transfer import UcxKVNode
    from tests.llmapi.ucx_peer import prefill_process

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=prefill_process, args=(child, 1.5), daemon=True)
    proc.start()
    assert parent.poll(60), "the prefill process did not start UCX"
    address = parent.recv()
    decode = UcxKVNode(pull_timeout_s=10)
    decode.start()

    def call(cmd, arg=None):
        parent.send((cmd, arg))
        assert parent.poll(30)
        return parent.recv()

    yield address, decode, call
    call("stop")
    proc.join(10)
    decode.stop()
    assert proc.exitcode == 0, "the prefill process did not exit after UcxKVNode.stop()"


def test_pull_moves_every_byte_and_frees_it(nodes):
    address, decode, call = nodes
    data = np.random.default_rng(0).integers(0, 256, 3 * 1024 * 1024 + 17, dtype=np.uint8)
    tid = call("offer", data.tobytes())
    got = decode.pull(address, tid, data.nbytes)
    assert np.array_equal(got, data)
    deadline = time.monotonic() + 5
    while call("stats")["held"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert call("stats")["held"] == 0 and call("stats")["served"] >= 1
    with pytest.raises(KVTransferError, match="no longer holds"):
        decode.pull(address, tid, data.nbytes)  # a second pull finds nothing


def test_a_buffer_nobody_pulls_is_held_until_its_timeout_then_gone(nodes):
    address, decode, call = nodes
    tid = call("offer", b"x" * 1000)
    time.sleep(0.6)
    assert call("stats")["held"] >= 1  # no early release: held until hold_s (1.5 s) runs out
    time.sleep(2.0)
    assert call("stats")["expired"] >= 1
    with pytest.raises(KVTransferError, match="timeout ran out"):
        decode.pull(address, tid, 1000)


def test_an_idle_node_does_not_poll(nodes):
    """Waiting for pull requests must sleep, not spin: ucxx's default wait re-schedules itself on
    the event loop, which kept ~60 % of a core busy per idle node (starving Triton's stubs)."""
    _, _, call = nodes
    before = call("cpu")
    time.sleep(2.0)
    used = call("cpu") - before
    assert used < 0.4, f"an idle UCX node used {used:.2f} CPU-s in 2 s"
