"""The machine a run is on, seen from the CLI: the runner and the backend it declares
(`runners`), and whether the machine is fit to measure (`health`, parsing in `healthparse`).
What a worker records of its machine is mlagate.worker.machine."""
