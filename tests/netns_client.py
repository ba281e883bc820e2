"""Run inside a test host's network namespace: stream prompts to a server there, print JSON.

``python tests/netns_client.py GRPC_URL METRICS_URL MAX_TOKENS PROMPT...`` sends every prompt
at once (one stream each) to ``ensemble`` and prints ``{"results": [{"texts", "error"}...],
"kv_bytes": N}`` -- the decode model's ``pdtrt_kv_transfer_bytes_total`` after the requests.
The test in the root namespace cannot reach the front server's addresses; this script can.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_client import ensemble_inputs, generate, metric  # noqa: E402


def main(argv: list[str]) -> None:
    url, metrics_url, max_tokens, prompts = argv[0], argv[1], int(argv[2]), argv[3:]
    results: list[dict | None] = [None] * len(prompts)

    def one(i: int) -> None:
        out = generate(url, "ensemble", ensemble_inputs(prompts[i], max_tokens),
                       request_id=f"netns-{i}", timeout_s=60)
        results[i] = {"texts": out.texts, "error": out.error, "final": out.final_seen}

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    print(json.dumps({"results": results, "kv_bytes": metric(
        metrics_url, "pdtrt_kv_transfer_bytes_total", model="decode")}))


if __name__ == "__main__":
    main(sys.argv[1:])
