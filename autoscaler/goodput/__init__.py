"""Goodput: statistical efficiency of a batch size, Pollux's step-time model, and the batch choice.

Pure numerics (numpy and scipy only), shared by the training helper (which picks its batch), the
engine (which prices a worker count) and the simulator, so all three price one count the same way.
Sources: Qiao et al., "Pollux: Co-adaptive Cluster Scheduling for Goodput-Optimized Deep
Learning" (OSDI'21) and AdaptDL's training library (petuum/adaptdl, Apache-2.0).

Conventions: B0 is a job's base global batch; `accum_steps` counts the micro-steps accumulated
before the synchronising one (AdaptDL's convention: 0 = no accumulation), so one step processes
replicas x local_batch x (accum_steps + 1) samples. Goodput is in samples-at-B0 per second.
"""
