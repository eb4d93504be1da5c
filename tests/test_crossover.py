from fractions import Fraction

import pytest

from mlagate import crossover


@pytest.mark.parametrize(
    ("rnv", "table"), [((512, 128, 128), 170), ((512, 192, 256), 398), ((512, 256, 256), 512)]
)
def test_reproduces_design_table(rnv, table):
    assert crossover.table_threshold(*rnv) == table


def test_integer_limit_is_a_supremum():
    assert crossover.limit(512, 256, 256) == 512
    assert crossover.max_absorbed_queries(512, 256, 256) == 511
    assert (
        max(crossover.max_absorbed_queries(512, 256, 256, T) for T in (10**3, 10**6, 10**12)) == 511
    )


@pytest.mark.parametrize("rnv", [(512, 128, 128), (512, 192, 256), (256, 64, 128), (64, 16, 16)])
def test_boundary_matches_cost_model_exactly(rnv):
    r, n, v = rnv
    d = n + v
    for T in (1, 2, 7, 64, 65, 333, 4096, 65536):
        m = crossover.max_absorbed_queries(r, n, v, T)
        for L in (m, m + 1):
            cheaper = Fraction(L * r * d + 2 * L * T * r) < Fraction(T * r * d + L * T * d)
            assert crossover.absorbed_wins(L, T, r, n, v) == cheaper
        assert crossover.absorbed_wins(m, T, r, n, v) or m == 0
        assert not crossover.absorbed_wins(m + 1, T, r, n, v)


def test_cold_cache_materialises_and_decode_stays_absorbed():
    assert crossover.expected_path(2, 0, 512, 128, 128) == "materialised"
    assert crossover.expected_path(1, 0, 512, 128, 128) == "absorbed"
    assert crossover.expected_path(2, 64, 512, 128, 128) == "absorbed"
    assert crossover.expected_path(171, 10**9, 512, 128, 128) == "materialised"
