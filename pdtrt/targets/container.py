"""What the targets pinned to an NVIDIA container release share (trtllm-0.21, trtllm-1.2).

Their pins and tool flags are data (``pdtrt/data/targets/<target>.yaml``,
:mod:`pdtrt.targets.schema`), their image is the one those pin, and what they build from is a
Hugging Face checkpoint (``model.path``, or the model's Hub name).
"""

from __future__ import annotations

from pdtrt.targets.base import BuildContext, BuildSource, TargetSupport
from pdtrt.targets.schema import TargetSchema, load_target_schema
from pdtrt.targets.trtllm_build import model_dir

__all__ = ["ContainerTarget"]


class ContainerTarget(TargetSupport):
    @property
    def schema(self) -> TargetSchema:
        """The version's pins and tool-flag schema (``pdtrt/data/targets/<target>.yaml``)."""
        return load_target_schema(self.target)

    @property
    def container_image(self) -> str:
        return self.schema.container

    def build_source(self, ctx: BuildContext) -> BuildSource:
        path, note = model_dir(ctx.dep)
        return BuildSource(model_dir=path, notes=(note,) if note else (), steps=())
