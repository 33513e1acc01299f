"""An example policy plug-in for pytorch-elastic-autoscaler: `weighted-fair-share`."""

from autoscaler_policy_example.policy import PLUGIN, WeightedFairShare, WeightedFairShareConfig

__all__ = ["PLUGIN", "WeightedFairShare", "WeightedFairShareConfig"]
