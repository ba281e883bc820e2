"""The link that joins a prefill instance to a decode instance, and KV-transfer time over it.

Which link really carries the KV cache:

- same GPU type with NVLink, both instances inside one node (``same_node``): NVLink, GPU to
  GPU (``gpu_link_bytes_per_s``);
- otherwise the KV leaves one node through a NIC and enters the other through the receiving
  GPU's PCIe: the slowest of the two host links and the NIC. An L40S has no NVLink and a PCIe
  Gen4 x16 host link (32 GB/s), so an H100 -> L40S transfer runs at <= 32 GB/s however fast the
  NIC is. The NIC default is 50 GB/s per GPU (a 400 Gb/s NIC, aiconfigurator's hint).

Transfer time of ``n`` prompt tokens: ``latency + n * kv_bytes_per_token / bytes_per_s``, where
the bytes per token are the whole instance's (all layers, all KV heads), i.e. what crosses.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdtrt.facts.catalog import GPU

__all__ = ["DEFAULT_NIC_BYTES_PER_S", "KVLink", "kv_link", "kv_transfer_s"]

DEFAULT_NIC_BYTES_PER_S = 50e9
# Point-to-point latency of one transfer (aiconfigurator's ~10 us), plus the handshake of a
# pull (connect, request, acknowledge): a few round trips.
DEFAULT_LINK_LATENCY_S = 50e-6


@dataclass(frozen=True, kw_only=True)
class KVLink:
    """A KV-transfer path with its bottleneck bandwidth (bytes/s, one direction)."""

    name: str
    bytes_per_s: float
    latency_s: float = DEFAULT_LINK_LATENCY_S


def kv_link(prefill_gpu: GPU, decode_gpu: GPU, *, same_node: bool = False,
            nic_bytes_per_s: float = DEFAULT_NIC_BYTES_PER_S) -> KVLink:
    """The link a KV cache crosses from ``prefill_gpu`` to ``decode_gpu`` (see module doc)."""
    nvlink = prefill_gpu.gpu_link.startswith("nvlink") and decode_gpu.gpu_link.startswith(
        "nvlink")
    if same_node and prefill_gpu.key == decode_gpu.key and nvlink:
        return KVLink(name=f"{prefill_gpu.gpu_link} (same node)",
                      bytes_per_s=prefill_gpu.gpu_link_bytes_per_s)
    candidates = {
        f"{prefill_gpu.key} host link": prefill_gpu.host_link_bytes_per_s,
        f"{decode_gpu.key} host link": decode_gpu.host_link_bytes_per_s,
    }
    if not same_node:
        candidates["NIC"] = nic_bytes_per_s
    name = min(candidates, key=candidates.__getitem__)
    return KVLink(name=name, bytes_per_s=candidates[name])


def kv_transfer_s(link: KVLink, num_tokens: int, kv_bytes_per_token: int) -> float:
    """Seconds to move ``num_tokens`` tokens of KV (``kv_bytes_per_token`` for the whole
    instance) over ``link``."""
    return link.latency_s + num_tokens * kv_bytes_per_token / link.bytes_per_s
