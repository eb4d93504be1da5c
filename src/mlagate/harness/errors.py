"""What a suite raises when the harness could not measure."""


class Invalid(Exception):
    """The case measured something other than what it claims, or could not measure: invalid,
    never failed. Raise it only after every mismatch already found has been asserted."""


def give_up(why: str, problems: list[str] | tuple[str, ...] = (), shown: int = 3) -> None:
    """Raise Invalid(why), but first fail on the mismatches already found: a check that could
    not finish never hides what it had already seen go wrong."""
    more = f" (+{len(problems) - shown} more)" if len(problems) > shown else ""
    assert not problems, "; ".join(problems[:shown]) + more
    raise Invalid(why)
