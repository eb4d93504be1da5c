"""The tiny model a case builds: its shapes, its config in an arm, and the build request sent
to the arm's worker.

`Shapes` is mixed into the case API (mlagate.harness.case.CaseRun): suites read mla.heads,
mla.kpool, mla.index_topk and call mla.config or mla.beyond_topk. It uses the case's `ctx`,
`case`, `module`, `geometry` and `profile`.
"""

from __future__ import annotations

from mlagate.matrix import thaw


class Shapes:
    """The case API's shapes, config and build request (mixed into CaseRun)."""

    @property
    def heads(self) -> int:
        """The profile's head count, never more than the real checkpoint has."""
        return min(self.profile.heads, self.geometry.num_attention_heads)

    def shapes(self) -> dict:
        p, g = self.profile, self.geometry
        return {
            "heads": self.heads,
            "hidden_size": p.hidden_size,
            "q_lora_rank": None if g.q_lora_rank is None else min(g.q_lora_rank, p.q_lora_rank),
            "vocab_size": p.vocab_size,
            "cache_lengths": list(p.cache_lengths),
            "widths": list(p.widths),
            "real_heads": g.num_attention_heads,
            "real_hidden_size": g.hidden_size,
        }

    @property
    def kpool(self) -> int:
        """The sparse indexer's pool width (1 where it does not pool: every cached key is its own
        window)."""
        ix = self.geometry.indexer
        return ix.kpool if ix is not None and ix.kpool else 1

    @property
    def index_topk(self) -> int | None:
        ix = self.geometry.indexer
        return None if ix is None else min(ix.topk, self.profile.index_topk)

    def beyond_topk(self, offset: int) -> int:
        """A cache length `offset` tokens past the indexer's top-k (the profile's cap where the
        module has no indexer), so every query of a sparse module really selects."""
        return (self.index_topk or self.profile.index_topk) + offset

    def config(self, arm: str | None = None, layers: int | None = None) -> dict:
        """The module's tiny-model config in an arm: its own keys plus the scaled geometry (r, n, v,
        rope untouched).

        layers asks for a whole model of at least that many decoder layers: the layer count
        key the config carries is raised, then the module's `deep` keys apply."""
        p, g, keys = self.profile, self.geometry, self.module.geometry_keys
        shapes = self.shapes()
        geo = {
            "kv_lora_rank": g.kv_lora_rank,
            "qk_nope_head_dim": g.qk_nope_head_dim,
            "v_head_dim": g.v_head_dim,
            "qk_rope_head_dim": g.qk_rope_head_dim,
            "num_attention_heads": self.heads,
            "hidden_size": p.hidden_size,
            "q_lora_rank": shapes["q_lora_rank"],
        }
        if g.indexer is not None:
            geo.update(
                {
                    "index_n_heads": min(g.indexer.n_heads, p.index_heads),
                    "index_head_dim": g.indexer.head_dim,
                    "index_topk": self.index_topk,
                }
            )
            if g.indexer.kpool is not None:
                geo["index_kpool"] = g.indexer.kpool
        config = {"vocab_size": p.vocab_size, **thaw(self.module.config_for(arm or self.case.arm))}
        if "num_key_value_heads" in config:
            config["num_key_value_heads"] = self.heads
        for name, value in geo.items():
            target = keys.get(name, name)
            if target:
                config[target] = value
        if layers:
            for name in ("num_hidden_layers", "num_layers"):
                if name in config:
                    config[name] = max(config[name], layers)
            config.update(thaw(self.module.deep))
        return config

    @property
    def checkpoint_path(self) -> str | None:
        """The local path of the case's real checkpoint on this runner (checkpoint evidence), else
        None."""
        if self.case.checkpoint is None:
            return None
        return self.ctx.matrix.checkpoints[self.case.checkpoint].runners.get(self.case.runner)

    def _build_request(
        self,
        arm: str,
        dtype: str,
        quant: dict | None,
        forced: bool,
        seed: int,
        score_scale: float = 1,
        layers: int | None = None,
    ) -> dict:
        g = self.geometry
        ckpt = self.checkpoint_path
        return {
            "key": "|".join(
                map(
                    str,
                    (
                        self.module.id,
                        g.id,
                        dtype,
                        quant,
                        forced,
                        seed,
                        score_scale,
                        self.profile.id,
                    ),
                )
            )
            + (f"|layers={layers}" if layers else "")
            + (f"|checkpoint={ckpt}" if ckpt else ""),
            "score_scale": score_scale,
            "checkpoint": ckpt,
            "import": self.module.import_path,
            "model": self.module.model,
            "args": self.module.args,
            "attention": self.module.attention_for(arm),
            "config": self.config(arm, layers),
            "dtype": dtype,
            "quant": quant,
            "seed": seed,
            "forced": forced,
            "geometry": {
                "heads": self.heads,
                "r": g.kv_lora_rank,
                "n": g.qk_nope_head_dim,
                "v": g.v_head_dim,
            },
        }
