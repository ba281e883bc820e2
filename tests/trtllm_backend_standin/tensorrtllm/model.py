"""A stand-in for NVIDIA's ``tensorrtllm`` Triton backend of TensorRT-LLM 0.21 -- tests only.

Triton 2.51 runs a backend directory that holds a ``model.py`` through the Python backend, so a
model with ``backend: "tensorrtllm"`` loads this file when the test's backend directory has it as
``tensorrtllm/model.py``. It is faithful where a generated repository can be wrong:

- it reads the model's parameters the way the C++ backend does -- a missing required parameter,
  an unknown ``gpt_model_type``, no engine at ``gpt_model_path``, orchestrator mode without
  ``participant_ids`` fail the load with the backend's own message -- from pdtrt's contract data
  (:mod:`pdtrt.targets.trtllm_backend`), so the contract and this stand-in cannot drift apart;
- it checks the placement parameters (``participant_ids`` / ``gpu_device_ids``: format, one group
  per instance, one GPU per rank, rank 0 left to the orchestrator, ranks = the engine's TP x PP);
- it serves the 0.21 ``tensorrt_llm`` request contract -- 0.21's input names (``seed``,
  ``min_tokens``), ``request_type`` context_only / generation_only / context_and_generation,
  ``context_phase_params`` out and in, streaming, ``stop`` -- with pdtrt's LLM-API engine model
  over the CPU reference of the LLM API and the reference checkpoint at ``gpt_model_path`` (its
  limits from the checkpoint's manifest, as the real backend takes them from the engine's
  ``config.json``).

It does not emulate MPI ranks, the orchestrator, GPUs, TensorRT engines or TensorRT-LLM's KV
transfer (the reference engine's own UCX transfer moves the KV, over shared memory/TCP).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import triton_python_backend_utils as pb_utils

from pdtrt.blueprint.manifest import MANIFEST_NAME, EngineManifest, read_manifest
from pdtrt.targets.trtllm_backend import load_backend_contract

_KV_TRANSFER_TIMEOUT_MS = 30_000


def _setting(manifest: EngineManifest, name: str) -> int:
    """A build setting recorded in the checkpoint's manifest (what config.json is to TRT-LLM)."""
    return int(manifest.build_settings["settings"][name]["value"])  # type: ignore[index]


def _engine_model(engine_dir: Path, manifest: EngineManifest, model_name: str) -> Any:
    """pdtrt's LLM-API engine model over the CPU reference LLM at ``engine_dir``, behind a seam
    that reads the 0.21 input names (imported here: torch only once the parameters passed)."""
    import os

    from pdtrt.engine_io import Role
    from pdtrt.ensemble import TRTLLM_0_21_INPUT_NAMES
    from pdtrt.llmapi import load_llm_api
    from pdtrt.runtime.engine.config import LLMEngineConfig, max_beam_width
    from pdtrt.runtime.engine.model import TritonPythonModel
    from pdtrt.runtime.triton_io import BackendTriton

    core_names = {v: k for k, v in TRTLLM_0_21_INPUT_NAMES.items()}  # seed -> random_seed

    class V021Names(BackendTriton):
        """Reads the 0.21 model's inputs; the engine model sees pdtrt's core names."""

        def receive(self, requests: Any, names: Any, *, decoupled: bool) -> list[Any]:
            wanted = [TRTLLM_0_21_INPUT_NAMES.get(n, n) for n in names]
            return [dataclasses.replace(r, inputs={core_names.get(k, k): v
                                                   for k, v in r.inputs.items()})
                    for r in super().receive(requests, wanted, decoupled=decoupled)]

    # NVIDIA's model serves every request type, so every instance can hand KV over: the
    # aggregated role with the KV cache transceiver configured.
    options = {name: _setting(manifest, name)
               for name in ("max_batch_size", "max_num_tokens", "max_input_len", "max_seq_len")}
    options["max_beam_width"] = max_beam_width(engine_dir)
    options["kv_cache_config"] = {"tokens_per_block": _setting(manifest, "tokens_per_block")}
    options["sampler_type"] = "TRTLLMSampler"  # the C++ backend samples with the C++ decoder
    options["cache_transceiver_config"] = {"backend": "UCX",
                                           "kv_transfer_timeout_ms": _KV_TRANSFER_TIMEOUT_MS}
    options["disable_overlap_scheduler"] = True  # 1.2 serves context-only requests only so
    config = LLMEngineConfig(role=Role.AGGREGATED, model=engine_dir, options=options,
                             ucx_tls=("sm", "tcp"))
    os.environ["UCX_TLS"] = ",".join(config.ucx_tls)
    api = load_llm_api()
    llm = api.LLM(str(engine_dir), skip_tokenizer_init=True, **config.options)
    model = TritonPythonModel(V021Names(pb_utils))
    model.setup(config, api, llm, model_name=model_name)
    return model


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        config = json.loads(args["model_config"])
        params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        count = sum(max(int(g.get("count", 1)), 1) for g in config.get("instance_group", []))
        engine_dir = Path(params.get("gpt_model_path", ""))
        manifest = (read_manifest(engine_dir) if (engine_dir / MANIFEST_NAME).is_file()
                    else None)
        error = load_backend_contract().load_error(
            params, instance_count=count or 1,
            tp_pp=manifest.tp * manifest.pp if manifest is not None else 1)
        if error is not None:
            raise pb_utils.TritonModelException(error)
        if manifest is None:
            raise pb_utils.TritonModelException(
                f"stand-in: {engine_dir} is not a pdtrt reference checkpoint (no {MANIFEST_NAME})")
        self.model = _engine_model(engine_dir, manifest, args["model_name"])

    def execute(self, requests: list[Any]) -> None:
        return self.model.execute(requests)

    def finalize(self) -> None:
        self.model.finalize()
