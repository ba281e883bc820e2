"""Fakes for seams that cannot run here (named as fakes, mirroring the real contracts)."""

from __future__ import annotations

from dataclasses import dataclass


class FakeNVMLError(Exception):
    pass


@dataclass
class _Mem:
    total: int


class FakeNVML:
    """Mirrors the pynvml functions pdtrt calls; ``devices`` = [(name, bytes, (major, minor))]."""

    def __init__(self, devices=(), driver="550.54.15", init_error=None):
        self.devices = list(devices)
        self.driver = driver
        self.init_error = init_error
        self.shutdown_calls = 0

    def nvmlInit(self):
        if self.init_error:
            raise FakeNVMLError(self.init_error)

    def nvmlShutdown(self):
        self.shutdown_calls += 1

    def nvmlSystemGetDriverVersion(self):
        return self.driver

    def nvmlDeviceGetCount(self):
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return self.devices[h][0].encode()  # older pynvml returns bytes

    def nvmlDeviceGetMemoryInfo(self, h):
        return _Mem(self.devices[h][1])

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return self.devices[h][2]
