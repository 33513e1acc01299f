"""The operator core: pure builders, status and reconcile plan; the loop that applies it."""
