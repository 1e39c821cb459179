"""The rule-based reward of the RLHF example, computed in the driver (pure torch, no Ray).

A stand-in for a reward model: it rewards responses for using one chosen token, which is enough to
give the loop a number that moves with the policy and is cheap to check by hand.
"""

from __future__ import annotations

import torch

__all__ = ["score"]


def score(responses: torch.Tensor, target_token: int) -> torch.Tensor:
    """Per-row reward: the fraction of response tokens equal to ``target_token``.

    Args:
        responses: int tensor ``[n, resp_len]``.
        target_token: the rewarded token id.

    Returns:
        float32 ``[n]`` in ``[0, 1]`` (zeros when ``resp_len`` is 0).

    Raises:
        ValueError: ``responses`` is not a 2-D integer tensor.
    """
    if responses.dim() != 2 or responses.is_floating_point() or responses.is_complex():
        raise ValueError(f"responses must be a 2-D integer tensor, got {responses.dtype} {list(responses.shape)}")
    if responses.shape[1] == 0:
        return torch.zeros(responses.shape[0], dtype=torch.float32)
    return (responses == target_token).float().mean(dim=1)
