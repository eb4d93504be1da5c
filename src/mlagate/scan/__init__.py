"""The static scanner: single-query guards on MLA fast paths, and its output formats; discovery of
the MLA classes in a tree (`discovery`, `modelargs`: the matrix module each runs as, `importable`)."""
