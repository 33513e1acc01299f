"""The only code that talks HTTP: the Kubernetes API (and, later, Prometheus)."""
