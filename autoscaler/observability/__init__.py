"""What the project exports: Prometheus metrics, health endpoints, Events."""
