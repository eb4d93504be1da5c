"""mlagate mutate: mutants of the patched dispatch code, run through the correctness suites."""
