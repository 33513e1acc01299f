"""Elastic PyTorchJobs on Kubernetes, sized by what they measurably gain."""

__version__ = "0.1.0"
