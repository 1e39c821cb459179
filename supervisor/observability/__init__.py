"""Observability: metrics (every one defined once), lifecycle hooks, structured logging, the HTTPS exporter."""
