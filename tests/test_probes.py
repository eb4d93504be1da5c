import textwrap

import pytest

from mlagate.worker import probes

STOCK = """
class A:
    def __call__(self, x):
        L = x.shape[1]
        if L == 1:
            q = self.embed_q(q)
        else:
            k = self.embed_q(lat, transpose=False)
            v = self.unembed_out(lat)
        if L == 1:
            out = self.unembed_out(out)
"""

INVERTED = """
class A:
    def __call__(self, x):
        if L > 1:
            k = self.embed_q(lat, False)
            v = self.unembed_out(lat)
        else:
            q = self.embed_q(q)
        if not (L > 1):
            out = self.unembed_out(out)
"""

DECISION = """
class A:
    def __call__(self, x):
        absorbed = L == 1 or L <= max_absorbed_queries(*self._dims, latent_length(lat))
        if absorbed:
            q = self.embed_q(q)
        else:
            k = self.embed_q(lat, transpose=False)
            v = self.unembed_out(lat)
        if absorbed:
            out = self.unembed_out(out)
class B:
    def __call__(self, x):
        if L == 1:
            q = self.embed_q(q)
"""


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (STOCK, [(True, "L == 1"), (True, "L == 1")]),
        (INVERTED, [(False, "L > 1"), (True, "not (L > 1)")]),
        (DECISION, [(True, "absorbed"), (True, "absorbed")]),
    ],
    ids=["stock", "inverted", "one-decision"],
)
def test_guards_are_located_with_their_polarity(source, expected):
    sites = probes.find_guards(textwrap.dedent(source), "A")
    assert [(s.absorbed_when, s.source) for s in sites] == expected


def test_other_classes_and_unrelated_ifs_are_left_alone():
    text = (
        DECISION
        + "\nclass C:\n    def f(self):\n        if L == 1:\n            return self.other(x)\n"
    )
    assert probes.find_guards(text, "C") == []
    assert len(probes.find_guards(text, "B")) == 1


@pytest.mark.parametrize(
    ("ops", "path"),
    [
        (["fold", "unfold"], "absorbed"),
        (["fold", "unfold", "fold", "unfold"], "absorbed"),
        (["expand_k", "expand_v"], "materialised"),
        (["fold", "expand_k", "unfold"], "split"),
        (["expand_k", "expand_v", "unfold"], "split"),
        (["fold"], "split"),
    ],
)
def test_classify_names_a_path_only_when_the_ops_agree(ops, path):
    assert probes.classify(ops) == path


def test_forcing_rule_overrides_only_when_asked():
    rule = probes.Forcing()
    assert rule(0, True, False) is False
    rule.mode = "absorbed"
    assert rule(0, True, False) is True and rule(1, False, True) is False
    rule.mode = "materialised"
    assert rule(0, True, True) is False
    assert rule.decisions == [(0, False), (0, False), (1, False), (0, True)]
