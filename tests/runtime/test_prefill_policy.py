"""Where a request's prefill runs (conditional disaggregation): the pure decision."""

from __future__ import annotations

import pytest

from pdtrt.prefill_policy import (
    PATH_REASONS,
    PrefillPath,
    PrefillPolicy,
    Reason,
    choose_path,
)

ON = PrefillPolicy(aggregated_below=4, max_local_prefill=32, max_prefill_queue_depth=2,
                   local_prefill_limit=256)
AGG, LOCAL, REMOTE = PrefillPath.AGGREGATED, PrefillPath.LOCAL, PrefillPath.REMOTE


@pytest.mark.parametrize(("policy", "prompt", "cached", "has_agg", "depth", "want"), [
    # today's defaults: everything not aggregated is prefilled remotely
    (PrefillPolicy(), 5, 0, False, 0.0, (REMOTE, Reason.LONG_NET_NEW)),
    (PrefillPolicy(local_prefill_limit=256), 5, 0, False, 9.0, (REMOTE, Reason.LONG_NET_NEW)),
    # the aggregated threshold comes first, and only with an aggregated pool
    (ON, 3, 0, True, 0.0, (AGG, Reason.BELOW_AGGREGATED)),
    (ON, 3, 0, False, 0.0, (LOCAL, Reason.SHORT_NET_NEW)),
    # short net-new prompts are local; the bound is inclusive
    (ON, 32, 0, True, 0.0, (LOCAL, Reason.SHORT_NET_NEW)),
    (ON, 33, 0, True, 0.0, (REMOTE, Reason.LONG_NET_NEW)),
    # what the decode side holds does not count (a prefix hit, once there is an index)
    (ON, 200, 180, True, 0.0, (LOCAL, Reason.SHORT_NET_NEW)),
    # a queued prefill pool sends a long prompt local -- if the decode engine takes it
    (ON, 200, 0, True, 2.0, (LOCAL, Reason.PREFILL_QUEUED)),
    (ON, 200, 0, True, 1.5, (REMOTE, Reason.LONG_NET_NEW)),
    (ON, 300, 0, True, 5.0, (REMOTE, Reason.LONG_NET_NEW)),  # beyond max_num_tokens
    (ON, 300, 290, True, 0.0, (REMOTE, Reason.LONG_NET_NEW)),  # likewise
    # no healthy prefill endpoint: the queue rule has nothing to go by
    (ON, 200, 0, True, None, (REMOTE, Reason.LONG_NET_NEW)),
    # without a decode limit nothing is local
    (PrefillPolicy(max_local_prefill=32), 5, 0, False, 0.0, (REMOTE, Reason.LONG_NET_NEW)),
])
def test_the_path_of_a_request(policy, prompt, cached, has_agg, depth, want):
    got = choose_path(policy, prompt_tokens=prompt, cached_tokens=cached, has_aggregated=has_agg,
                      prefill_queue_depth=depth)
    assert got == want
    assert got in PATH_REASONS  # the router has a counter series for it
