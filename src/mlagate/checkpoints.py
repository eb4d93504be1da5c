"""Tiny checkpoints made on the spot: what to write, where, and the key that names it.

A synthetic checkpoint is a directory in the runtime's own format (config.json with the
real r / n / v and rope dim, few layers and heads; model.safetensors with the runtime's own
seeded initialisation; optionally quantised by the runtime's own quantiser), written by an
arm's worker (mlagate.worker.speculation) into the cache directory under a content key, and loaded
with the runtime's own loader. Nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mlagate.arm.arms import cache_root

FORMAT = 1  # bump when the writer changes what lands in a checkpoint directory


class CheckpointError(ValueError):
    """A checkpoint that cannot be described or found; one line."""


@dataclass(frozen=True)
class Synthetic:
    """What a synthetic checkpoint holds: the runtime classes, their config and the weights'
    recipe."""

    runtime: str  # runtime distribution and version that writes it, e.g. "mlx-lm 0.32.2"
    import_path: str
    model: str
    args: str
    config: dict = field(hash=False)
    seed: int = 0
    dtype: str = "float32"
    quant: dict | None = field(default=None, hash=False)  # {"group_size", "bits"} or None
    perturb: dict | None = field(default=None, hash=False)  # {"seed", "scale"} or None

    @property
    def key(self) -> str:
        """A content key: equal recipes give the same directory, any change a new one."""
        blob = json.dumps({"format": FORMAT, **asdict(self)}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:20]

    def folder(self, root: Path | None = None) -> Path:
        return Path(root or cache_root()) / "checkpoints" / self.key

    def request(self, root: Path | None = None) -> dict:
        """The worker's write_checkpoint request."""
        return {
            "path": str(self.folder(root)),
            "import": self.import_path,
            "model": self.model,
            "args": self.args,
            "config": self.config,
            "seed": self.seed,
            "dtype": self.dtype,
            "quant": self.quant,
            "perturb": self.perturb,
        }


def tiny_config(config: dict, layers: int) -> dict:
    """A module's tiny-model config with `layers` decoder layers (the runtime's own key), all
    dense where the config has `first_k_dense_replace`: the experts are not the subject, and
    MLX's CPU backend has no bfloat16 gather_mm for them."""
    for name in ("num_hidden_layers", "num_layers"):
        if name in config:
            out = {**config, name: layers}
            if "first_k_dense_replace" in out:
                out["first_k_dense_replace"] = layers
            return out
    raise CheckpointError(
        "the module's config names no layer count (num_hidden_layers or num_layers)"
    )


def real(path: str) -> Path:
    """A real checkpoint directory on this runner: it must hold config.json."""
    folder = Path(path).expanduser()
    if not (folder / "config.json").is_file():
        raise CheckpointError(f"checkpoint directory {folder} holds no config.json")
    return folder
