"""A case's identity: `suite::module::arm::geometry::dtype::backend`, and `::aa` for an A/A case.

Parsed once where an id comes in (a result, a job list, a head run's plan) and formatted once
here; code reads its fields, never the text split on `::`. The text is what results and every
document carry (unchanged by this type). `geometry` is the checkpoint's id for a case with
checkpoint evidence, else the geometry's.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

SEP = "::"
AA = "aa"
FIELDS = ("suite", "module", "arm", "geometry", "dtype", "backend")


class CaseIdError(ValueError):
    """A case id that is not `suite::module::arm::geometry::dtype::backend[::aa]`; one line."""


@dataclass(frozen=True, order=True)
class CaseId:
    suite: str
    module: str
    arm: str
    geometry: str
    dtype: str
    backend: str
    aa: bool = False

    def __post_init__(self) -> None:
        for name in FIELDS:
            value = getattr(self, name)
            if not isinstance(value, str) or not value or SEP in value:
                raise CaseIdError(f"case id field {name}: {value!r} is no id part")

    @classmethod
    def parse(cls, text: object, where: str = "") -> CaseId:
        """The id a text names; CaseIdError naming it (and where it was read) otherwise."""
        at = f"{where}: " if where else ""
        if not isinstance(text, str):
            raise CaseIdError(f"{at}case id {text!r} is not text")
        parts = text.split(SEP)
        aa = len(parts) == len(FIELDS) + 1 and parts[-1] == AA
        if len(parts) != len(FIELDS) + aa or not all(parts):
            raise CaseIdError(
                f"{at}case id {text!r} is not suite::module::arm::geometry::dtype::backend[::aa]"
            )
        return cls(*parts[: len(FIELDS)], aa=aa)

    def _parts(self) -> tuple[str, ...]:
        return tuple(getattr(self, name) for name in FIELDS) + ((AA,) if self.aa else ())

    def __str__(self) -> str:
        return SEP.join(self._parts())

    def on_arm(self, arm: str) -> CaseId:
        """The same case on another arm (a head case's base counterpart, a patched arm's
        baseline)."""
        return replace(self, arm=arm)

    @property
    def param(self) -> str:
        """The pytest parameter id of the case within its suite's test: the id without the suite."""
        return SEP.join(self._parts()[1:])

    @property
    def file_stem(self) -> str:
        """The file name (without .json) of the case's result."""
        text = str(self)
        slug = "".join(c if c.isalnum() or c in "._-" else "_" for c in text.replace(SEP, "__"))
        return f"{slug[:150]}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"
