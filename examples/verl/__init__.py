"""Examples written only against the installed verl (run them in an environment with verl)."""
