"""The gate, in the CLI process: the run's orchestration only: the request, planning, the
launcher, run, shards and the cost table (shard), merge, resume, reuse, head/base runs for
runtime repositories, the output-folder lock, live progress, preflight and the bounds of
command-line arguments."""
