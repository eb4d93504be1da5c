"""The static scanner: single-query guards on MLA fast paths, and its output formats."""
