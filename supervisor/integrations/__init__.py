"""Supervision for programs written against other projects' APIs, unmodified (verl's)."""
