"""Prefix reuse in the reference twin, as TensorRT-LLM 1.2 does it: the block hash is
upstream's (checked against the same arithmetic compiled as C++), the radix tree of reusable
blocks publishes upstream's KV cache events, and a cache hit changes no output."""

from __future__ import annotations

import asyncio
import random
import shutil
import subprocess

import pytest

from pdtrt.kv_blocks import block_hash, block_hashes, reusable_blocks
from pdtrt.llmapi.reference.prefix_cache import PrefixCache
from tests.runtime.conftest import hf_greedy

TPB = 4

# BlockKeyHasher::hash (kvCacheManager.cpp), tokens only, in C++'s own integer types: the
# Python transcription must agree with what a compiler makes of the upstream expression
_CXX = r"""
#include <cstdint>
#include <cstdio>
#include <vector>
int main() {
    int n;
    while (std::scanf("%d", &n) == 1) {
        unsigned long long parent; std::scanf("%llu", &parent);
        std::vector<int> tokens(n);
        for (auto& t : tokens) std::scanf("%d", &t);
        std::size_t seed = tokens.size() ^ parent * UINT64_C(0xbf58476d1ce4e5b9);
        for (int token : tokens) {
            uint32_t a = static_cast<uint32_t>(token);
            a = ((a >> 16) ^ a) * 0x45d9f3b;
            a = ((a >> 16) ^ a) * 0x45d9f3b;
            a = (a >> 16) ^ a;
            seed ^= a + 0x9e3779b9 + (seed << 6) + (seed >> 2);
        }
        std::printf("%zu\n", seed);
    }
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to compile the C++ rule")
def test_block_hash_is_the_cplusplus_rule(tmp_path):
    (tmp_path / "h.cc").write_text(_CXX)
    subprocess.run(["g++", "-O1", "-o", str(tmp_path / "h"), str(tmp_path / "h.cc")], check=True)
    rng = random.Random(7)
    cases = [(rng.sample(range(200_000), rng.randint(1, 64)), rng.getrandbits(64))
             for _ in range(200)]
    cases += [([0], 0), ([2**31 - 1, 1], 2**64 - 1)]
    stdin = "".join(f"{len(t)} {p} {' '.join(map(str, t))}\n" for t, p in cases)
    out = subprocess.run([str(tmp_path / "h")], input=stdin, capture_output=True, text=True,
                         check=True).stdout.split()
    assert [int(x) for x in out] == [block_hash(t, p) for t, p in cases]


def test_block_hashes_chain_full_blocks_only():
    tokens = list(range(10, 21))  # 11 tokens: two full blocks of 4
    hashes = block_hashes(tokens, TPB)
    assert hashes == [block_hash(tokens[:4]), block_hash(tokens[4:8], hashes[0])]
    # the same block under another parent hashes differently
    assert block_hashes([99, 98, 97, 96, *tokens[4:8]], TPB)[1] != hashes[1]
    assert reusable_blocks(9, TPB) == 2 and reusable_blocks(8, TPB) == 1  # len - 1 tokens
    assert reusable_blocks(0, TPB) == 0


def _kv(n: int, layers: int = 2):
    import torch

    return tuple((torch.arange(n, dtype=torch.float32).reshape(1, 1, n, 1) + 100 * layer,
                  -torch.arange(n, dtype=torch.float32).reshape(1, 1, n, 1) - 100 * layer)
                 for layer in range(layers))


def test_a_stored_prompt_is_matched_block_by_block_with_its_kv():
    cache = PrefixCache(tokens_per_block=TPB, max_blocks=16, event_buffer_max_size=64,
                        window_size=128)
    prompt = list(range(1, 11))  # 10 tokens: 2 full blocks
    assert cache.match(prompt) == (0, None)
    cache.store(prompt, _kv(11))
    n, kv = cache.match(prompt[:9] + [500])  # 9 tokens agree: both blocks reusable
    assert n == 8
    assert kv[1][0].flatten().tolist() == [100 + i for i in range(8)]
    assert cache.match(prompt[:8])[0] == 4  # 8 tokens: the last must be computed
    assert cache.match([7, *prompt[1:]])[0] == 0  # another first block: nothing
    assert (cache.stats.reused_blocks, cache.stats.missed_blocks) == (3, 5)


def test_events_have_tensorrt_llms_shape_and_removals_follow_lru():
    cache = PrefixCache(tokens_per_block=TPB, max_blocks=3, event_buffer_max_size=64,
                        window_size=128)
    a, b = [1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 9, 9, 9, 9]
    cache.store(a, _kv(8))
    cache.store(b, _kv(8))  # shares a's first block
    created, first, second = cache.events()
    assert [e["event_id"] for e in (created, first, second)] == [0, 1, 2]
    assert created == {"event_id": 0, "window_size": 128,
                       "data": {"type": "created", "num_blocks_per_cache_level": [3, 0]}}
    h = block_hashes(a, TPB)
    assert first["data"]["type"] == "stored" and first["data"]["parent_hash"] is None
    assert [blk["block_hash"] for blk in first["data"]["blocks"]] == h
    assert first["data"]["blocks"][0] == {
        "type": "stored_block", "block_hash": h[0], "cache_level": 0, "priority": 35,
        "tokens": [{"type": "unique_token", "token_id": t, "token_extra_id": 0}
                   for t in a[:4]]}
    assert second["data"]["parent_hash"] == h[0]  # only the new block, under a's first
    assert [blk["block_hash"] for blk in second["data"]["blocks"]] == block_hashes(b, TPB)[1:]
    cache.match(a + [0])  # a's blocks used last: b's leaf is the LRU one
    cache.store([5, 5, 5, 5], _kv(4))  # a fourth block: one must go
    stored, removed = cache.events()
    assert removed["data"] == {"type": "removed", "block_hashes": [block_hashes(b, TPB)[1]]}
    assert cache.num_blocks == 3 and cache.match(b + [0])[0] == 4


def test_blocks_that_running_sequences_hold_leave_no_room_and_no_events_when_off():
    cache = PrefixCache(tokens_per_block=TPB, max_blocks=4)
    cache.store(list(range(8)), _kv(8))
    cache.store(list(range(50, 58)), _kv(8), in_use_blocks=2)  # room for 2 of the 4
    assert cache.num_blocks == 2 and cache.events() == []  # event buffer size 0: none kept
    assert cache.match(list(range(50, 59)))[0] == 8  # the older prompt's blocks went
    assert cache.match(list(range(9)))[0] == 0
    bounded = PrefixCache(tokens_per_block=TPB, max_blocks=64, event_buffer_max_size=2)
    for i in range(5):
        bounded.store([i] * 4, _kv(4))
    assert [e["event_id"] for e in bounded.events()] == [4, 5]  # the newest two


# -- the reference LLM ------------------------------------------------------------------------
OPTIONS = {"max_batch_size": 4, "max_num_tokens": 256, "max_seq_len": 128,
           "enable_iter_perf_stats": True}


def _generate(llm, prompt, n):
    from pdtrt.llmapi.reference import SamplingParams

    async def go():
        return await llm.generate_async(prompt, SamplingParams(max_tokens=n, end_id=-1)).aresult()
    return asyncio.run(go()).outputs[0].token_ids


@pytest.fixture(scope="module")
def reuse_llm(tiny_model_dir):
    from pdtrt.llmapi.reference import LLM

    made = LLM(str(tiny_model_dir), skip_tokenizer_init=True, **OPTIONS,
               kv_cache_config={"tokens_per_block": 8, "event_buffer_max_size": 100})
    yield made
    made.shutdown()


def test_a_cache_hit_changes_no_token_and_is_counted(reuse_llm, tiny_model):
    system = [1, *range(100, 140)]  # a shared 41-token system prompt: 5 full blocks
    first, second = system + [7, 8, 9], system + [50, 51]
    want = [hf_greedy(tiny_model, p, 12) for p in (first, second)]
    assert _generate(reuse_llm, first, 12) == want[0]
    events = reuse_llm.get_kv_cache_events(timeout=0)
    assert events[0]["data"]["type"] == "created"
    stored = [b["block_hash"] for e in events if e["data"]["type"] == "stored"
              for b in e["data"]["blocks"]]
    # the prompt's 5 blocks when it was prefilled, then at its end the blocks of prompt and
    # output less the last token (44 + 11 = 55 tokens: a 6th), as upstream's release stores
    assert stored == block_hashes((first + want[0])[:55], 8)
    assert _generate(reuse_llm, second, 12) == want[1]  # 40 of its 43 tokens from the cache
    stats = reuse_llm.get_stats(timeout=0)[-1]["kvCacheStats"]
    assert stats["reusedBlocks"] == 5 and stats["missedBlocks"] == 5
    assert stats["cacheHitRate"] == pytest.approx(0.5)
    events = reuse_llm.get_kv_cache_events(timeout=0)
    new = [b["block_hash"] for e in events for b in e["data"]["blocks"]]
    assert new == block_hashes((second + want[1])[:54], 8)[5:]  # only its own 6th block
    assert events[0]["data"]["parent_hash"] == block_hashes(first, 8)[4]  # under the system


def test_reuse_off_reuses_nothing_and_publishes_nothing(tiny_model_dir, tiny_model):
    from pdtrt.llmapi.reference import LLM

    llm = LLM(str(tiny_model_dir), skip_tokenizer_init=True, **OPTIONS,
              kv_cache_config={"tokens_per_block": 8, "enable_block_reuse": False,
                               "event_buffer_max_size": 100})
    try:
        prompt = [1, *range(200, 230)]
        for _ in range(2):
            assert _generate(llm, prompt, 6) == hf_greedy(tiny_model, prompt, 6)
        stats = llm.get_stats(timeout=0)[-1]["kvCacheStats"]
        assert stats["reusedBlocks"] == 0
        assert llm.get_kv_cache_events(timeout=0) == []
    finally:
        llm.shutdown()
