"""The static scanner: single-query guards on MLA fast paths, and its output formats; the MLA
classes of a tree (`discovery`; `modelargs`: the matrix module each runs as; `importable`)."""
