"""The pytest process: the hooks that turn a case into a result, the case API the suites use,
timing, the suites' declared gates and the verdict policy. Imports no arm."""

from mlagate.harness.errors import Failed, Invalid, check, give_up

__all__ = ["Failed", "Invalid", "check", "give_up"]
