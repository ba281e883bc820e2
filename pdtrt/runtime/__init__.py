"""Code that runs inside Triton's Python backend (and standalone, for tests).

Three rooms, one per kind of Triton model pdtrt generates, over shared seam and protocol
modules:

- :mod:`.router` -- the router BLS model (:mod:`.router.model`), one module per role: the
  path choice (:mod:`.router.paths`), the disaggregated path (:mod:`.router.disaggregated`),
  the aggregated and local paths (:mod:`.router.aggregated`), one phase call
  (:mod:`.router.calls`), the KV indexes (:mod:`.router.kv_upkeep`), the background start-up
  (:mod:`.router.startup`) and its metrics (:mod:`.router.metrics`); its parameters
  (:mod:`.router.config`), endpoint pools (:mod:`.router.pool`), health probes and the liveness
  deadline (:mod:`.router.health`), how it reaches a phase (:mod:`.router.bls_client` in this
  server, :mod:`pdtrt.client.streams` over gRPC), the client's reply (:mod:`.router.reply`)
  and the requests a reload loses (:mod:`.router.reload_losses`);
- :mod:`.engine` -- the engine model of trtllm-1.2 and of the reference target
  (:mod:`.engine.model`), over TensorRT-LLM's LLM API on a GPU or pdtrt's CPU reference of it
  (:mod:`pdtrt.llmapi`), with its parameters as LLM-API options (:mod:`.engine.config`), one
  request's responses (:mod:`.engine.responder`), the requests in flight
  (:mod:`.engine.inflight`) and its metrics (:mod:`.engine.metrics`);
- :mod:`.text` -- pre- and postprocessing (tokenizer in, detokenizer out).

Shared by the rooms: :mod:`.triton_io` (the one seam into ``pb_utils``, injected),
:mod:`.request_parsing` (router and engine requests, parsed once at the edge),
:mod:`.phase_params` (the ``context_phase_params`` hand-off), :mod:`.shutdown` (ending a stub
whose parent died) and :mod:`.faults` (test-only fault injection). The CPU engine, its
scheduler and the UCX KV transfer are not here: they live beside their only user,
:mod:`pdtrt.llmapi.reference`. The threads, loops and locks of each process are mapped in
docs/design/serve.md ("Concurrency map").
"""
