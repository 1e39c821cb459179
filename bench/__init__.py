"""Benchmarks: ``python -m bench`` runs them all and writes bench/RESULTS.md (see docs/benchmarks.md)."""
