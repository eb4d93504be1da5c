"""The pytest process: the hooks that turn a case into a result, the case API the suites use,
timing, the suites' declared gates and the verdict policy. Imports no arm."""

from mlagate.harness.errors import Invalid, give_up

__all__ = ["Invalid", "give_up"]
