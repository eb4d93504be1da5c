"""What a verdict means: each case's expected verdict from the matrix (`expectations`) and the
gate outcome of a measured verdict, with the exit status of every verb (`outcomes`)."""
