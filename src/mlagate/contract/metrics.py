"""A result's metrics read as typed data: checked against the metrics schema of its suite's
contract (`metrics: version + schema` in suites/<kind>/<name>.suite.yaml) by every reader of
results, so a malformed table (a cache length "abc", a list where a table belongs) is refused in
one line naming the file and the key instead of giving no plots and no change. Only a result
whose test body ran to its end (a pass, or a fail the suite judged) is checked: the metrics of an
argued, invalid or raised case are partial by nature (and give no figures unless they meet the
schema).

A result names the version of its suite's metrics it was written under (`metrics_version`); one
written under another version than the contract's is not checked against it (and gives no key
figures or plots: mlagate.contract.suites.Contract.typed). A result without the field (written
before it existed) is checked against the contract's current schema. A suite no contract is known
for (not shipped, and not named by the caller) has nothing to check against.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path

import jsonschema

from mlagate import documents
from mlagate.contract import suites


class MetricsError(documents.DocumentError):
    """A result whose metrics break its suite's metrics schema; one line naming file and key."""


@functools.cache
def _shipped() -> dict[str, Path]:
    from mlagate.paths import bundled

    return {sid: e.path for sid, e in suites.shipped(bundled("suites")).items() if e.path}


Known = Mapping[str, Path | None]  # suite id -> its test body, for suites besides the shipped


def contract(suite: str, known: Known | None = None) -> suites.Contract | None:
    """The contract of a suite: one the caller knows (a suite beside its matrix), else the
    shipped one; None when there is none or it does not read."""
    path = (known or {}).get(suite) or _shipped().get(suite)
    if path is None or not suites.contract_path(Path(path)).is_file():
        return None
    try:
        return suites.load(Path(path))
    except suites.ContractError:
        return None


def ran_to_its_end(row: dict) -> bool:
    """Whether the suite's test body wrote all its metrics: a pass, or a fail it judged. An
    argued row ran nothing, an invalid one stopped where the harness could not measure, and an
    exception of the runtime (`runtime_raised`) stopped the body where it was raised."""
    if row.get("verdict") == "pass":
        return True
    failure = row.get("failure") if isinstance(row.get("failure"), dict) else {}
    return row.get("verdict") == "fail" and "runtime_raised" not in (failure.get("kinds") or [])


def check(row: dict, where: str, known: Known | None = None) -> dict:
    """row, when it did not run to its end or its metrics meet its suite's metrics schema;
    MetricsError else."""
    suite = row.get("suite")
    if not ran_to_its_end(row):
        return row
    d = contract(suite, known) if isinstance(suite, str) else None
    if d is None or row.get("metrics_version", d.metrics_version) != d.metrics_version:
        return row
    try:
        error = jsonschema.exceptions.best_match(d.validator().iter_errors(row.get("metrics", {})))
    except RecursionError:
        raise MetricsError(f"{where}: metrics: nested too deeply") from None
    if error is None:
        return row
    key = ".".join(["metrics", *(str(p) for p in error.absolute_path)])
    raise MetricsError(
        f"{where}: {key}: {error.message.splitlines()[0][:160]} (suite {suite}'s metrics schema, "
        f"version {d.metrics_version})"
    )


def version(suite: str, known: Known | None = None) -> int | None:
    """The metrics version a result of this suite is written under (None: no contract)."""
    d = contract(suite, known)
    return d.metrics_version if d else None
