"""The kill matrix of `mlagate mutate` as a document of the report: its one loader
(schema mlagate.mutate/1), the module x operator grid, and its HTML section and page
(jinja2 templates, autoescaped). mlagate.mutate writes it; the report renders it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import jinja2
from markupsafe import Markup

from mlagate import documents

SCHEMA = "mlagate.mutate/1"
STATUSES = ("killed", "survived", "only invalid", "no control", "equivalent")
FILE = "kill-matrix.json"

KillMatrix = dict


class KillMatrixError(ValueError):
    """A kill matrix file that cannot be read; one line naming the file."""


def load(path: Path) -> KillMatrix:
    """A kill matrix, read and validated by mlagate.documents (schema kill-matrix.json)."""
    try:
        return documents.load(Path(path), "kill-matrix")
    except documents.DocumentError as exc:
        raise KillMatrixError(str(exc)) from None


def cell(rows: list[dict]) -> str:
    """One module x operator cell: each mutant's first killing suite, or its status in capitals."""
    labels = Counter(r["killed_by"][0] if r["killed_by"] else r["status"].upper() for r in rows)
    return ", ".join(f"{k} x{n}" if n > 1 else k for k, n in sorted(labels.items()))


def grid(doc: KillMatrix) -> tuple[list[str], list[tuple[str, list[str]]]]:
    ops = sorted({m["operator"] for m in doc["mutants"]})
    keys = sorted({(m["arm"], m["module"]) for m in doc["mutants"]})
    body = []
    for arm, module in keys:
        mine = [m for m in doc["mutants"] if (m["arm"], m["module"]) == (arm, module)]
        body.append(
            (f"{arm} {module}", [cell([m for m in mine if m["operator"] == op]) for op in ops])
        )
    return ops, body


_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(Path(__file__).resolve().parent / "templates" / "mutation")),
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
    undefined=jinja2.StrictUndefined,
)


def section(doc: KillMatrix) -> str:
    """The kill-matrix section of the report page (HTML, escaped by the template)."""
    ops, body = grid(doc)
    return _ENV.get_template("killmatrix.html.j2").render(doc=doc, ops=ops, body=body)


def page(doc: KillMatrix) -> str:
    return _ENV.get_template("page.html.j2").render(section=Markup(section(doc)))
