"""Policies: the plug-in contract, the registry and the built-in policies (all pure)."""
