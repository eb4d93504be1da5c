"""Adding an arm source kind is one record in mlagate.armsources: a toy kind (`version:`, the
runtime's distribution pinned by version) is refused by the matrix until it is registered, then
read, keyed and turned into the requirement the install hands to pip, with no other edit."""

from types import MappingProxyType

import pytest

from mlagate import armsources, matrix, plan
from mlagate.arm import armidentity, installing
from tests.conftest import ROOT

SHIPPED = ROOT / "matrix.yaml"
TOY_ARM = """arms:
  mlx-lm-toy:
    runtime: mlx-lm
    version: "0.32.2"
    role: stock
"""


@pytest.fixture
def toy(monkeypatch):
    kind = armsources.SourceKind("version", lambda spec, ref, dist: f"{dist}=={spec}")
    kinds = MappingProxyType({**armsources.KINDS, "version": kind})
    monkeypatch.setattr(armsources, "KINDS", kinds)
    return kind


def with_toy_arm(extra: str = "") -> str:
    return SHIPPED.read_text().replace("arms:", TOY_ARM.rstrip("\n") + extra, 1)


def test_an_unregistered_source_kind_is_refused():
    with pytest.raises(matrix.MatrixError, match=r"arms\.mlx-lm-toy.*version"):
        matrix.parse(with_toy_arm(), SHIPPED)


def test_a_registered_source_kind_is_read_keyed_installed_and_planned(toy):
    m = matrix.parse(with_toy_arm(), SHIPPED)
    arm, stock = m.arms["mlx-lm-toy"], m.arms["mlx-lm-0.32.2"]
    assert (arm.source.kind, arm.source.spec, arm.source.ref) == ("version", "0.32.2", None)
    runtime = m.runtimes[arm.runtime]
    assert installing._requirement(arm, runtime) == "mlx-lm==0.32.2"
    assert installing._requirement(stock, runtime) == "mlx-lm==0.32.2"
    assert armidentity.cache_key(arm) != armidentity.cache_key(stock)  # the kind is keyed
    cases = plan.expand(m, plan.Selection(arms=("mlx-lm-toy",)), "quick", "cpu", "linux-cpu")
    assert cases and {c.arm for c in cases} == {"mlx-lm-toy"}


def test_a_source_kind_without_a_ref_refuses_one(toy):
    with pytest.raises(matrix.MatrixError, match=r"mlx-lm-toy\.ref: ref is only for git arms"):
        matrix.parse(with_toy_arm("\n    ref: v1"), SHIPPED)
