"""The command line, one module per verb (as asv keeps its commands): each has
`add_parser(sub)` and `main(args) -> int`, a thin shell over the plain functions of
mlagate.gate, mlagate.report, mlagate.scan and mlagate.mutate."""
