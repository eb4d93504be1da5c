"""Reports rendered from result documents: the commit page, plots, history, JUnit, job summary;
`compare` of two runs' results."""
