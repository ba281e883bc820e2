"""The serving image of a container target: its base, what pdtrt needs in it, the recipe.

A generated ``launch.sh`` runs pdtrt's Python models and ``pdtrt serve`` inside NVIDIA's image,
which lacks some of what they import (``tritonclient`` above all: the router's gRPC phase client
loads it at its first request, so without it the server looks healthy and every request through
``ensemble`` fails). The data (``pdtrt/data/targets/<target>-image.yaml``) lists what the base
image is documented to hold (``provided``, each with its source) and what pdtrt installs on top
(``installed``, pinned, each with its reason). :func:`dockerfile_values` are what
``Dockerfile.j2`` formats, and :func:`image_tag` names the image by the recipe's content, so a
changed recipe is a new image that ``launch.sh`` builds, never a stale one it reuses.
"""

from __future__ import annotations

import hashlib
from functools import cache

from pydantic import BaseModel, ConfigDict

from pdtrt.enums import Target
from pdtrt.targets.schema import target_data

__all__ = ["ImageRecipe", "Requirement", "dockerfile_values", "image_tag", "load_image_recipe"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Requirement(_Frozen):
    requirement: str  # a pip requirement: name[extras] and version specifier
    source: str = ""  # provided: where the base image is documented to hold it
    why: str = ""  # installed: what in pdtrt needs it
    module: str = ""  # installed: the module the recipe imports to check it


class ImageRecipe(_Frozen):
    target: Target
    python: str  # the base image's Python (major.minor)
    provided: tuple[Requirement, ...]
    installed: tuple[Requirement, ...]


@cache
def load_image_recipe(target: Target) -> ImageRecipe:
    """The image data of ``target``; :class:`~pdtrt.errors.BuildError` when it has none."""
    return ImageRecipe.model_validate(target_data(f"{target}-image.yaml",
                                                  f"no serving image recipe for {target}"))


def dockerfile_values(recipe: ImageRecipe, *, base: str) -> dict[str, object]:
    """What ``Dockerfile.j2`` formats: the base, the pins with their reasons, the imports that
    check them."""
    return {"base": base, "data": f"pdtrt/data/targets/{recipe.target}-image.yaml",
            "reasons": [f"{r.requirement}: {r.why}" for r in recipe.installed],
            "pins": [f'"{r.requirement}"' + ("" if i == len(recipe.installed) - 1 else " \\")
                     for i, r in enumerate(recipe.installed)],
            "imports": ", ".join(r.module for r in recipe.installed if r.module)}


def image_tag(recipe_text: str, *, target: Target) -> str:
    """``pdtrt-<target>:<12 hex digits of the recipe's SHA-256>``."""
    digest = hashlib.sha256(recipe_text.encode()).hexdigest()[:12]
    return f"pdtrt-{target}:{digest}"
