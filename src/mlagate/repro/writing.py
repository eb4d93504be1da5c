"""The standalone script of a finding for one case (the suite's tiny model: the runtime's own
ModelArgs, the case's scaled geometry and the suite's seed), and the issue body in Markdown."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from string import Template
from types import SimpleNamespace

from mlagate.harness.shapes import Shapes
from mlagate.matrix import Matrix, thaw
from mlagate.repro.findings import DOC, Finding


class _Tiny(Shapes):
    """The case API's shapes without a run: the config a suite builds the module's model from."""

    def __init__(self, matrix: Matrix, module: str, geometry: str, profile: str, arm: str):
        self.module = matrix.modules[module]
        self.geometry = matrix.geometries[geometry]
        self.profile = matrix.profiles[profile]
        self.case = SimpleNamespace(arm=arm, checkpoint=None)


@dataclass(frozen=True)
class Script:
    case: dict  # what the script's CASE holds: import, classes, config, geometry, seed, settings
    text: str


def gate(gates: dict, path: str, backend: str, profile: str):
    """A suite gate by dotted path; a per-backend or per-profile value (a mapping of backends
    or of profiles) for `backend` and `profile`."""
    value = gates
    for part in path.split("."):
        value = value[part]
    for key in (backend, profile):
        if isinstance(value, dict) and key in value:
            value = value[key]
    return value


def _setting(gates: dict, shapes, value, backend: str, profile: str):
    """A finding's setting: a suite gate by dotted path, `profile.KEY` the profile's shape, any
    other value as it is."""
    if not isinstance(value, str):
        return value
    if value.startswith("profile."):
        return thaw(getattr(shapes, value.removeprefix("profile.")))
    return gate(gates, value, backend, profile)


def case_of(matrix: Matrix, cid, profile: str, finding: Finding) -> dict:
    tiny = _Tiny(matrix, cid.module, cid.geometry, profile, cid.arm)
    gates = thaw(matrix.suites[cid.suite].gates)
    own = thaw(matrix.suites[finding.suite].gates)  # the settings: the finding's own suite
    module = matrix.modules[cid.module]
    shapes = matrix.profiles[profile]
    settings = {k: _setting(own, shapes, v, cid.backend, profile) for k, v in finding.settings}
    return {
        "case": str(cid),
        "module": cid.module,
        "import": module.import_path,
        "model": module.model,
        "attention": module.attention_for(cid.arm),
        "args": module.args,
        "config": tiny.config(cid.arm, layers=settings.get("layers")),
        "geometry": {
            "id": cid.geometry,
            "r": tiny.geometry.kv_lora_rank,
            "n": tiny.geometry.qk_nope_head_dim,
            "v": tiny.geometry.v_head_dim,
            "rope": tiny.geometry.qk_rope_head_dim,
            "heads": tiny.heads,
            "profile": profile,
        },
        "seed": gates.get("seed", 0),
        "dtype": cid.dtype,
        **settings,
    }


def script(case: dict, finding: Finding, requirement: str, mlx: str) -> Script:
    prelude = resources.files(__package__).joinpath("scripts", "prelude.pyt").read_text("utf-8")
    head = Template(prelude).substitute(
        title=finding.title,
        case=case["case"],
        config=finding.config,
        requirement=requirement,
        mlx=mlx,
        case_json=json.dumps(case, indent=1, sort_keys=True),
    )
    return Script(case, head + finding.body())


def issue(finding: Finding, case: dict, run, script_name: str, script_text: str) -> str:
    """The issue body: versions, backend, what was expected, what happened, the script and its
    output (the run's; `run` None: not run here)."""
    out = run.output.strip() if run is not None else "(not run)"
    facts = [
        line for line in out.splitlines() if line.split(":")[0] in ("runtime", "mlx", "python")
    ]
    happened = run.verdict_line if run is not None and run.verdict_line else "(no verdict line)"
    geo = case["geometry"]
    return "\n".join(
        [
            f"# {finding.title}",
            "",
            "## Environment",
            "",
            *[f"- {line}" for line in facts],
            "",
            "## Shapes",
            "",
            f"`{case['module']}` as a tiny model of the runtime's own `{case['model']}` / "
            f"`{case['args']}`: r/n/v/rope {geo['r']}/{geo['n']}/{geo['v']}/{geo['rope']} "
            f"(geometry {geo['id']}), {geo['heads']} heads, hidden "
            f"{case['config'].get('hidden_size')}, vocab {case['config'].get('vocab_size')}, "
            f"{case['dtype']}, random weights under seed {case['seed']}.",
            "",
            "## Expected",
            "",
            finding.expected + ".",
            "",
            "## What happened",
            "",
            happened,
            "",
            f"## Reproducer (`{script_name}`, needs only the runtime and MLX)",
            "",
            "```python",
            script_text.rstrip(),
            "```",
            "",
            "## Its output",
            "",
            "```",
            out,
            "```",
            "",
            f"Found by mlagate's `{finding.name}` check (its {DOC} section "
            f"`{finding.anchor}`), case `{case['case']}`.",
            "",
        ]
    )
