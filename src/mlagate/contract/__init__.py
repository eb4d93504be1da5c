"""A suite's contract, read as data from suites/<kind>/<name>.suite.yaml (`suites`): its typed
settings (`gates`), its typed metrics (`metrics`) and the generated gate reference (`gatedoc`)."""
