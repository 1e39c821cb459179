"""Compatibility layers that mirror other projects' import paths."""
