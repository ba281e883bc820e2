"""pdtrt's OpenAI-compatible HTTP front (``/v1/models``, ``/v1/completions``,
``/v1/chat/completions``) over a deployment's router: :mod:`.protocol` (request bodies),
:mod:`.text` (tokenizer, chat template, detokenizer, stop strings), :mod:`.deployment` (what is
served and the gRPC client that reaches it), :mod:`.generation` (one request's deltas),
:mod:`.app` (the aiohttp routes and OpenAI shapes), :mod:`.server` (running it)."""
