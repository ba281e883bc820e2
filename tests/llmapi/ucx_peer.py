"""A prefill-side UCX node in its own process, driven over a multiprocessing pipe."""

from __future__ import annotations

import time

import numpy as np


def prefill_process(conn, timeout_s: float) -> None:
    from pdtrt.llmapi.reference.kv_transfer import UcxKVNode

    node = UcxKVNode(hold_s=timeout_s)
    node.start()
    conn.send(node.address)
    while True:
        cmd, arg = conn.recv()
        if cmd == "offer":
            conn.send(node.offer(np.frombuffer(arg, dtype=np.uint8).copy()))
        elif cmd == "stats":
            s = node.stats
            conn.send({"served": s.served, "expired": s.expired, "held": len(s.held)})
        elif cmd == "cpu":  # CPU seconds this process has used (all threads)
            conn.send(time.process_time())
        elif cmd == "stop":
            node.stop()
            conn.send(None)
            return
