"""`mlagate repro`: a finding of a case as a report a maintainer can send upstream.

`findings` (which finding a case's configuration shows, and the script body that shows it),
`writing` (the standalone script, its geometry and seed, and the issue body), `env` (a fresh
virtual environment holding only the arm's packages, and the script run there), `core` (one
request in, one result out). The scripts import only the runtime and MLX, never mlagate.
"""
