"""The page of a bisection (mlagate.bisect/1): templates/page/bisect.html.j2, in the report's
style, escaped by the template."""

from __future__ import annotations

from mlagate.report.page import ENV


def page(doc: dict) -> str:
    return ENV.get_template("bisect.html.j2").render(d=doc)
