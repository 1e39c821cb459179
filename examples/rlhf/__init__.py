"""The RLHF-shaped example job: rollout, reference log-probs and reward on supervised worker groups.

A driver (:mod:`.driver`) runs a step loop against two groups of tiny CPU language models
(:mod:`.workers`): the rollout group samples responses to a batch of prompts, the reference group
scores those responses with a frozen copy of the policy, and the driver computes a rule-based reward
(:mod:`.reward`). Every step checks that each prompt came back exactly once, in order, so a rank killed
mid-call (the chaos suite's job) shows up as an error rather than as silently lost or duplicated
samples. ``rlhf.toml`` is the spec the supervisor daemon runs it from.
"""
