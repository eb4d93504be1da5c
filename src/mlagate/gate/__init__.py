"""The gate: which runner and backend a run is for, what each case is expected to do, and the
gate outcome of every result (mlagate.gate.outcomes)."""
