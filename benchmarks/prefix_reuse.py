"""What the reference twin's KV block reuse buys a multi-turn chat (issue 27 items 1 and 5).

One reference ``LLM`` per setting -- ``enable_block_reuse`` off, then on -- on the same seeded
Llama-shaped model (bigger than the test model, so that a prefill costs real compute on a CPU),
serves the same chats one request at a time: ``--chats`` conversations of ``--turns`` turns,
each starting with the same ``--system`` token system prompt; turn k sends the conversation so
far (system prompt, earlier user turns and answers) plus ``--user`` new tokens and asks for
``--answer`` tokens. Reported per setting: TTFT p50 of first and of later turns, prompt tokens
computed (prompt minus what came from the cache), the cache's reused / missed blocks, and
whether every answer is the same token for token (greedy; it must be).

    .venv/bin/python benchmarks/prefix_reuse.py                     # ~1 min on 2 cores
    .venv/bin/python benchmarks/prefix_reuse.py --json results/prefix_reuse-DATE.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _model_dir(layers: int, hidden: int) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=2048, hidden_size=hidden, intermediate_size=hidden * 3,
                         num_hidden_layers=layers, num_attention_heads=8,
                         num_key_value_heads=4, max_position_embeddings=4096,
                         bos_token_id=1, eos_token_id=2)
    path = Path(tempfile.mkdtemp(prefix="pdtrt-reuse-model-"))
    LlamaForCausalLM(config).eval().save_pretrained(path)
    return path


def _chats(args: argparse.Namespace) -> list[list[list[int]]]:
    """Each chat's turns' new tokens (the system prompt is turn 0's start)."""
    import random

    rng = random.Random(7)
    system = [1] + [rng.randrange(3, 2048) for _ in range(args.system - 1)]
    return [[(system if t == 0 else []) + [rng.randrange(3, 2048) for _ in range(args.user)]
             for t in range(args.turns)] for _ in range(args.chats)]


async def _first_token_s(llm, prompt: list[int], n: int) -> tuple[float, list[int]]:
    from pdtrt.llmapi.reference import SamplingParams

    start = time.perf_counter()
    ttft = None
    result = llm.generate_async(prompt, SamplingParams(max_tokens=n, end_id=-1),
                                streaming=True)
    async for _step in result:
        if ttft is None:
            ttft = time.perf_counter() - start
    assert ttft is not None
    return ttft, list(result.outputs[0].token_ids)


def run(model: Path, reuse: bool, chats: list[list[list[int]]], answer: int,
        tokens_per_block: int) -> dict:
    from pdtrt.llmapi.reference import LLM

    llm = LLM(str(model), skip_tokenizer_init=True, max_batch_size=4, max_num_tokens=8192,
              max_seq_len=4096, enable_iter_perf_stats=True,
              kv_cache_config={"tokens_per_block": tokens_per_block,
                               "enable_block_reuse": reuse})
    first, later, answers, computed = [], [], [], 0
    reused = 0  # blocks reused so far (get_stats has nothing before the first request)
    try:
        for chat in chats:
            history: list[int] = []
            for turn, new in enumerate(chat):
                prompt = history + new
                before = reused
                ttft, tokens = asyncio.run(_first_token_s(llm, prompt, answer))
                reused = llm.get_stats(0)[-1]["kvCacheStats"]["reusedBlocks"]
                computed += len(prompt) - (reused - before) * tokens_per_block
                (later if turn else first).append(ttft)
                answers.append(tokens)
                history = prompt + tokens
        stats = llm.get_stats(0)[-1]["kvCacheStats"]
    finally:
        llm.shutdown()
    return {"reuse": reuse, "ttft_first_turn_p50_ms": 1e3 * statistics.median(first),
            "ttft_later_turns_p50_ms": 1e3 * statistics.median(later),
            "prompt_tokens_computed": computed, "reused_blocks": stats["reusedBlocks"],
            "missed_blocks": stats["missedBlocks"], "answers": answers}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=4)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--system", type=int, default=512, help="system prompt tokens")
    parser.add_argument("--user", type=int, default=32, help="new tokens per turn")
    parser.add_argument("--answer", type=int, default=16, help="tokens per answer")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--tokens-per-block", type=int, default=32)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    model = _model_dir(args.layers, args.hidden)
    chats = _chats(args)
    runs = [run(model, reuse, chats, args.answer, args.tokens_per_block)
            for reuse in (False, True)]
    same = runs[0]["answers"] == runs[1]["answers"]
    for r in runs:
        print(f"reuse {'on ' if r['reuse'] else 'off'}: TTFT p50 first turns "
              f"{r['ttft_first_turn_p50_ms']:.1f} ms, later turns "
              f"{r['ttft_later_turns_p50_ms']:.1f} ms; prompt tokens computed "
              f"{r['prompt_tokens_computed']}; blocks reused {r['reused_blocks']}, missed "
              f"{r['missed_blocks']}")
    print(f"answers identical: {same}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "args": vars(args) | {"json": str(args.json)}, "identical": same,
            "machine": f"{platform.machine()}, {platform.python_version()}",
            "runs": [{k: v for k, v in r.items() if k != "answers"} for r in runs]},
            indent=2) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
