"""mlagate bisect: the commit of a runtime tree's history where a case's verdict changed.

`request` (what one bisection is asked), `history` (the commits between the ends, their trees
written from git as `run --head` writes base's), `measure` (one commit's cases, run through
mlagate.gate.run with the result store, so a commit measured once is never measured again),
`search` (the bisection over verdicts: bad, good, skipped), `timing` (the noise-aware side for
the performance suites), `document` (mlagate.bisect/1 and its page)."""
