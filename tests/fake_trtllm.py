"""Fake TensorRT-LLM build tools: executables that record their argv and write plausible outputs.

``install_fake_tools(tmp)`` writes ``tmp/bin/trtllm-build`` and, under ``tmp/examples``,
``quantization/quantize.py``, ``models/core/llama/convert_checkpoint.py`` and ModelOpt's
``llm_ptq/hf_ptq.py`` (trtllm-1.2's FP8 step). Each appends its
argv (JSON, one line) to ``$FAKE_TRTLLM_RECORD``. With ``FAKE_TRTLLM_FAIL=<tool>`` (or
``<tool>@<text in the output dir>``) that tool writes a partial output, prints an error and
exits 1.
"""

from __future__ import annotations

import sys
from pathlib import Path

_SCRIPT = '''#!{python}
import json, os, sys
from pathlib import Path
tool = {tool!r}
with open(os.environ["FAKE_TRTLLM_RECORD"], "a") as f:
    f.write(json.dumps([tool, *sys.argv[1:]]) + "\\n")
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
out = Path(args.get("--output_dir") or args["--export_path"])
out.mkdir(parents=True, exist_ok=True)
print(f"[fake {{tool}}] writing {{out}}", flush=True)
fail = os.environ.get("FAKE_TRTLLM_FAIL", "")
if fail.split("@")[0] == tool and ("@" not in fail or fail.split("@")[1] in str(out)):
    (out / "partial.bin").write_bytes(b"x")
    print("RuntimeError: fake failure", flush=True)
    sys.exit(1)
if tool == "trtllm-build":
    ckpt = json.loads((Path(args["--checkpoint_dir"]) / "config.json").read_text())
    config = {{"version": "0.21.0", "pretrained_config": ckpt, "build_config": {{
        "max_batch_size": int(args["--max_batch_size"]),
        "plugin_config": {{"tokens_per_block": int(args["--tokens_per_block"])}}}}}}
    (out / "config.json").write_text(json.dumps(config))
    (out / "rank0.engine").write_bytes(b"engine")
elif tool == "hf_ptq.py":  # ModelOpt: a unified Hugging Face checkpoint
    hf = json.loads((Path(args["--pyt_ckpt_path"]) / "config.json").read_text())
    (out / "config.json").write_text(json.dumps(hf))
    (out / "hf_quant_config.json").write_text(json.dumps({{"quantization": {{
        "quant_algo": args["--qformat"].upper(), "kv_cache_quant_algo": None}}}}))
    (out / "model.safetensors").write_bytes(b"weights")
else:
    hf = json.loads((Path(args["--model_dir"]) / "config.json").read_text())
    kv = args.get("--kv_cache_dtype")
    ckpt = {{"architecture": "LlamaForCausalLM", "num_hidden_layers": hf["num_hidden_layers"],
            "num_attention_heads": hf["num_attention_heads"],
            "num_key_value_heads": hf["num_key_value_heads"],
            "head_size": hf["hidden_size"] // hf["num_attention_heads"],
            "quantization": {{"kv_cache_quant_algo": kv.upper() if kv else None}}}}
    (out / "config.json").write_text(json.dumps(ckpt))
    (out / "rank0.safetensors").write_bytes(b"weights")
'''


def install_fake_tools(tmp: Path) -> tuple[Path, Path]:
    """(bin dir, examples dir) holding the fakes."""
    bin_dir, examples = tmp / "bin", tmp / "examples"
    for path, tool in ((bin_dir / "trtllm-build", "trtllm-build"),
                       (examples / "quantization" / "quantize.py", "quantize.py"),
                       (examples / "models/core/llama/convert_checkpoint.py",
                        "convert_checkpoint.py"),
                       (examples / "llm_ptq" / "hf_ptq.py", "hf_ptq.py")):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_SCRIPT.format(python=sys.executable, tool=tool))
        path.chmod(0o755)
    return bin_dir, examples
