"""Grafana dashboards for ray-supervisor's Prometheus metrics, generated from code (see generate.py)."""
