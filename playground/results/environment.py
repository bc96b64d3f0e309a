"""The environment a figure was measured in, as every result records it (playground.envinfo builds it): versions,
the CPU or GPU, threads, the variables that change a measurement, and the pair (pairs.models.ModelPair.describe)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .base import Json


@dataclass
class PairRecord:
    """What a loaded pair was: its models' names, where and in what dtype they ran, their sizes, and per model the
    kernels its linear layers ran on (pairs.kernels.KernelChoice.to_dict(), by role: "target", "draft")."""

    target: str = ""
    draft: str | None = None
    device: str = "cpu"
    dtype: str = "float32"
    vocab_size: int | None = None
    max_context: int | None = None
    target_params: int | None = None
    draft_params: int | None = None
    kernels: dict[str, dict[str, Json]] = field(default_factory=dict)

    def target_kernels(self) -> str | None:
        """"blas" or "onednn" where the target's linear layers were placed on one, else None."""
        return (self.kernels.get("target") or {}).get("kernels")


@dataclass
class Environment:
    """Versions, the machine and the variables that change a measurement; `pair` where a pair was loaded."""

    playground: str = ""
    python: str = ""
    torch: str = ""
    transformers: str = ""
    platform: str = ""
    cpu: str = ""
    cpu_count: int | None = None
    torch_threads: int | None = None
    cuda: str | None = None
    gpu: str | None = None
    variables: dict[str, str] = field(default_factory=dict)
    pair: PairRecord | None = None

    def to_dict(self) -> dict[str, Json]:
        """The JSON document (a run document embeds it as is)."""
        return dataclasses.asdict(self)
