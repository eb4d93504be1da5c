"""The gate, in the CLI process: run orchestration (run), shards and the cost table (shard),
merge, runner health, head/base runs for runtime repositories, the output-folder lock, live
progress, compare and resume, and the bounds of command-line arguments."""
