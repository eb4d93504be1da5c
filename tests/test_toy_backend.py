"""Adding a backend is one record in mlagate.backends plus its budgets: a toy backend, added to
the registry, is refused by the matrix until every per-backend setting names it, and then
planned, offered to --backend and checked by `mlagate health`, with no other edit."""

import copy
import dataclasses
from types import MappingProxyType

import pytest
import yaml

from mlagate import backends, cli, matrix, plan
from mlagate.machine import health
from tests.conftest import ROOT

SHIPPED = ROOT / "matrix.yaml"
SHIPPED_NAMES = ("cpu", "metal", "cuda")
TOY_RUNNER = "  linux-toy:\n    backend: toy\n    runs_on: [self-hosted, Linux, X64, toy]\n"


@pytest.fixture
def toy(monkeypatch):
    record = backends.Backend(
        "toy",
        device="gpu",
        probe="toy",
        platforms=("linux",),
        only_on="the toy backend runs only on Linux",
        health=MappingProxyType({"linux": ("blas",)}),
    )
    registry = MappingProxyType({**backends.REGISTRY, "toy": record})
    monkeypatch.setattr(backends, "REGISTRY", registry)
    return record


def with_toy_runner(text: str) -> str:
    return text.replace("\nrunners:", "\nrunners:\n" + TOY_RUNNER.rstrip("\n"), 1)


def with_toy_budgets(text: str, leave_out: int | None = None) -> tuple[str, int]:
    """Every per-backend mapping of the matrix given a `toy` entry (a copy of its cpu one), but
    the one numbered leave_out."""
    data = yaml.safe_load(text)
    stated = 0

    def walk(node):
        nonlocal stated
        if isinstance(node, dict):
            if set(node) == set(SHIPPED_NAMES):
                if stated != leave_out:
                    node["toy"] = copy.deepcopy(node["cpu"])
                stated += 1
            for v in list(node.values()):
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(data)
    return yaml.safe_dump(data, sort_keys=False), stated


def test_a_runner_of_an_unregistered_backend_is_refused():
    refused = r"runners\.linux-toy\.backend.*cpu or metal or cuda"
    with pytest.raises(matrix.MatrixError, match=refused):
        matrix.parse(with_toy_runner(SHIPPED.read_text()), SHIPPED)


def test_a_registered_backend_needs_every_budget_then_is_planned(toy):
    text = with_toy_runner(SHIPPED.read_text())
    with pytest.raises(matrix.MatrixError, match=r"\.toy: required: one entry") as refused:
        matrix.parse(text, SHIPPED)  # the runner is accepted; the first budget without toy is not
    assert "suites." in str(refused.value)

    stated_text, stated = with_toy_budgets(text)
    assert stated >= 5  # the shipped matrix's per-backend settings: budgets, floors, margins
    m = matrix.parse(stated_text, SHIPPED)
    assert m.runners["linux-toy"].backend == "toy"

    cases = plan.expand(m, plan.Selection(), "quick", "toy", "linux-toy", keep_skipped=True)
    assert cases and {c.backend for c in cases} == {"toy"}
    on_cpu = plan.expand(m, plan.Selection(), "quick", "cpu", "linux-cpu", keep_skipped=True)
    assert {c.suite for c in cases} == {c.suite for c in on_cpu}

    for leave_out in (0, stated - 1):  # any one budget left unstated: refused, naming it
        one_less, _ = with_toy_budgets(text, leave_out)
        with pytest.raises(matrix.MatrixError, match=r"\.toy: required: one entry per backend"):
            matrix.parse(one_less, SHIPPED)


def test_the_cli_offers_it_and_health_checks_it(toy, monkeypatch):
    parsed = cli.parser("plan").parse_args(["plan", "--backend", "toy", "--runner", "linux-toy"])
    assert parsed.backend == "toy"

    here = health.check(health.System(), backend="toy")  # this Linux machine: its own checks
    assert [c.name for c in here.checks if c.name in ("toy", "blas")] == ["blas"]
    elsewhere = dataclasses.replace(toy, platforms=("darwin",))
    registry = MappingProxyType({**backends.REGISTRY, "toy": elsewhere})
    monkeypatch.setattr(backends, "REGISTRY", registry)
    refused = [c for c in health.check(health.System(), backend="toy").checks if c.name == "toy"]
    assert [(c.status, c.detail) for c in refused] == [
        ("fail", "backend toy expected, but the toy backend runs only on Linux")
    ]


def test_a_worker_reports_the_registered_backend_of_its_device(monkeypatch):
    """The worker's fingerprint reads the registry (real MLX, this CPU machine): a record for
    the CPU device ahead of cpu is the backend it reports."""
    import mlx.core as mx

    assert backends.running(mx) == "cpu"
    toy = dataclasses.replace(backends.REGISTRY["cpu"], name="toy")
    monkeypatch.setattr(backends, "REGISTRY", MappingProxyType({"toy": toy, **backends.REGISTRY}))
    assert backends.running(mx) == "toy"
