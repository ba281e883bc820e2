"""The engine model's metrics from the LLM API's iteration stats (StatsPublisher)."""

from __future__ import annotations

from pdtrt.runtime.engine.metrics import StatsPublisher


class _Metrics:
    def __init__(self) -> None:
        self.values: dict[str, float] = {}

    def set(self, name: str, value: float) -> None:
        self.values[name] = value

    def add(self, name: str, delta: float) -> None:
        self.values[name] = self.values.get(name, 0) + delta


class _LLM:
    def __init__(self) -> None:
        self.rows: list[dict] = []

    def get_stats(self, timeout: float) -> list[dict]:
        return self.rows


def test_block_reuse_counters_grow_by_what_the_cumulative_stats_grew():
    metrics, llm = _Metrics(), _LLM()
    publisher = StatsPublisher(metrics, llm)  # type: ignore[arg-type]
    publisher.submitted = True
    for reused, missed in ((0, 5), (5, 5), (5, 5), (9, 6)):
        llm.rows = [{"kvCacheStats": {"maxNumBlocks": 10, "usedNumBlocks": 2,
                                      "reusedBlocks": reused, "missedBlocks": missed}}]
        publisher.publish(num_live=0, num_held=0)
    assert metrics.values["kv_reused"] == 9 and metrics.values["kv_missed"] == 6
    assert metrics.values["kv_usage"] == 0.2
    llm.rows = [{"kvCacheStats": {"maxNumBlocks": 10}}]  # tensorrt_llm without the keys
    publisher.publish(num_live=0, num_held=0)
    assert metrics.values["kv_reused"] == 9
