"""The worker process (`python -I -m mlagate.worker`): imports only the standard library, MLX
and one arm. Its modules never import the rest of mlagate (an import-linter contract in
`tox -e lint` enforces it)."""
