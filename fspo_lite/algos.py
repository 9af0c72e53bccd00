"""The math of GRPO, FSPO and token-reward advantages as pure tensor functions (docs/algorithms.md, sections 1, 2 and 4,
states each method and its defaults).

Nothing here touches a model: every function maps tensors to tensors, so each formula can be
checked by hand. Shapes: B responses, T completion tokens; `mask` is 1 on real completion tokens.
"""

from __future__ import annotations

import torch

KL_CLAMP = 10.0
LOSS_AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "dr_grpo")


def group_advantages(
    rewards: torch.Tensor, group_size: int, scale_by_std: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """Group-relative advantage per response: (R - mean_group) / (std_group + eps).

    `rewards` is 1-D with each group's G responses contiguous. The std is the sample
    (unbiased) std, as in TRL and verl; a group of one has std 0. With scale_by_std=False
    this is Dr.GRPO's R - mean_group.
    """
    rewards = torch.as_tensor(rewards)
    rewards = rewards if rewards.is_floating_point() else rewards.float()
    if rewards.ndim != 1 or rewards.numel() % group_size != 0:
        raise ValueError(f"rewards must be 1-D with a multiple of group_size={group_size} entries, got {tuple(rewards.shape)}")
    grouped = rewards.view(-1, group_size)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if scale_by_std:
        std = grouped.std(dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(centred[:, :1])
        centred = centred / (std + eps)
    return centred.reshape(-1)


def zero_std_group_fraction(rewards: torch.Tensor, group_size: int) -> float:
    """Share of groups whose rewards are all equal (they give no learning signal)."""
    grouped = torch.as_tensor(rewards, dtype=torch.float32).view(-1, group_size)
    return (grouped.max(dim=1).values == grouped.min(dim=1).values).float().mean().item()


def fspo_flip(advantages: torch.Tensor, sentence_mask: torch.Tensor) -> torch.Tensor:
    """FSPO advantage flip: A' = A where mask * A >= 0, else -A.

    `sentence_mask` is +1 on tokens of sentences the verifier supports, -1 on tokens of
    unsupported ones and 0 elsewhere (tags, answer, unverifiable text), so supported
    sentences never get a negative advantage and unsupported ones never a positive one.
    """
    if advantages.shape != sentence_mask.shape:
        raise ValueError(f"shapes differ: advantages {tuple(advantages.shape)} vs mask {tuple(sentence_mask.shape)}")
    conflict = (sentence_mask * advantages) < 0
    return torch.where(conflict, -advantages, advantages)


def strict_unchecked(advantages: torch.Tensor, sentence_mask: torch.Tensor) -> torch.Tensor:
    """Strict FSPO: a response none of whose sentences the verifier could check keeps no positive advantage.

    A row of `sentence_mask` that is 0 on every token (no reasoning sentence was labelled +1 or -1, e.g. reasoning
    that is a bare name) has the flip nothing to act on, so plain FSPO leaves it GRPO's advantage, and a policy can
    escape the flip by writing nothing checkable. Here such a row's advantages become min(A, 0): never pushed up,
    pushed down as before. Rows with at least one checked sentence are unchanged.
    """
    if advantages.shape != sentence_mask.shape:
        raise ValueError(f"shapes differ: advantages {tuple(advantages.shape)} vs mask {tuple(sentence_mask.shape)}")
    unchecked = (sentence_mask == 0).all(dim=-1, keepdim=True)
    return torch.where(unchecked, advantages.clamp(max=0.0), advantages)


def step_score(labels: list[int]) -> float:
    """FSPO's step-wise factuality score: mean of +1/-1 over verified sentences (0 if none)."""
    verified = [label for label in labels if label != 0]
    return sum(verified) / len(verified) if verified else 0.0


LOG_RATIO_CLAMP = 20.0
"""Bound on log pi - log pi_old before exp in the surrogate (verl: +-20; exp(20) = 4.9e8 stays finite in float32)."""


def entropy_bonus(token_loss: torch.Tensor, entropy: torch.Tensor, coef: float) -> torch.Tensor:
    """token_loss - coef * entropy per token: aggregated like the policy loss, it adds -coef x the
    mean token entropy, so minimising the loss raises the entropy (train.entropy_coef)."""
    return token_loss - coef * entropy if coef else token_loss


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 ("low_var_kl") estimate of KL(pi_theta || pi_ref), clamped to [-10, 10]."""
    log_ratio = (ref_logp - logp).clamp(-KL_CLAMP, KL_CLAMP)
    return (torch.exp(log_ratio) - log_ratio - 1).clamp(-KL_CLAMP, KL_CLAMP)


def clipped_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO clipped policy loss per token and a bool tensor marking tokens where clipping was active.

    loss = -min(r * A, clip(r, 1 - eps_low, 1 + eps_high) * A), r = exp(logp - old_logp), with the
    log-ratio clamped to [-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP] before exp (as verl does), so a huge
    log-ratio on a token (masked or not) gives a finite loss instead of inf (and 0 * inf = NaN).
    """
    ratio = torch.exp((logp - old_logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - epsilon_low, 1.0 + epsilon_high)
    return torch.maximum(unclipped, clipped), clipped > unclipped


def logprob_gap(sampler_logp: torch.Tensor, trainer_logp: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Mean and max |sampler - trainer| log-prob over the sampled tokens (mask 1), as
    `sampler_logprob_gap_mean` and `sampler_logprob_gap_max`; NaN for both when no token is sampled.

    At mu = 1 with the sampler's log-probs as pi_old, the engine must have sampled with the weights the
    trainer holds before its update. With the current adapter the gap is rounding and kernel differences;
    an engine still serving an older adapter (a missed refresh, a wake-up from sleep with stale weights)
    shows the whole change of the updates it missed, while the clipped ratio hides it as clipping.
    """
    keep = mask.bool()
    if not keep.any():
        return {"sampler_logprob_gap_mean": float("nan"), "sampler_logprob_gap_max": float("nan")}
    difference = (sampler_logp.float() - trainer_logp.float()).abs()[keep]
    return {"sampler_logprob_gap_mean": difference.mean().item(), "sampler_logprob_gap_max": difference.max().item()}


def aggregate_loss(
    token_loss: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "token-mean",
    max_completion_length: int | None = None,
    total_tokens: float | None = None,
    total_sequences: int | None = None,
) -> torch.Tensor:
    """Reduce a (B, T) per-token loss to a scalar.

    token-mean: sum / number of tokens. seq-mean-token-mean: mean over sequences of each
    sequence's token mean. dr_grpo: sum / (sequences * max_completion_length).
    With gradient accumulation pass the whole step's `total_tokens` / `total_sequences` so the
    micro-batch losses add up to the full-batch loss.
    The normalisers are used as given (with several processes they are global counts / world
    size, e.g. 0.5 tokens per rank): no floor at 1, which would shrink the gradient; a step with
    no token (or sequence) at all gives a zero loss.
    """
    mask = mask.to(token_loss.dtype)
    sequences = total_sequences if total_sequences is not None else token_loss.shape[0]
    masked = token_loss.masked_fill(mask == 0, 0.0) * mask  # a masked non-finite token stays out of the sum
    if mode == "token-mean":
        tokens = float(total_tokens if total_tokens is not None else mask.sum())
        return masked.sum() / tokens if tokens > 0 else masked.sum() * 0.0
    if mode == "seq-mean-token-mean":
        per_sequence = masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
        return per_sequence.sum() / float(sequences) if sequences > 0 else per_sequence.sum() * 0.0
    if mode == "dr_grpo":
        if not max_completion_length:
            raise ValueError("dr_grpo aggregation needs max_completion_length")
        return masked.sum() / (float(sequences) * max_completion_length) if sequences > 0 else masked.sum() * 0.0
    raise ValueError(f"unknown loss aggregation {mode!r}; choose one of {', '.join(LOSS_AGGREGATIONS)}")


def selective_log_softmax(logits: torch.Tensor, tokens: torch.Tensor, chunk_size: int = 4) -> torch.Tensor:
    """log softmax(logits)[tokens] without materialising the full log-softmax.

    Processes `chunk_size` rows at a time, so peak extra memory is chunk_size * T * V floats
    instead of B * T * V (the vocabulary is 49k for SmolLM2, 152k for Qwen2.5).
    """
    out = []
    for rows, row_tokens in zip(logits.split(chunk_size), tokens.split(chunk_size)):
        rows = rows.float()
        picked = rows.gather(-1, row_tokens.unsqueeze(-1)).squeeze(-1)
        out.append(picked - torch.logsumexp(rows, dim=-1))
    return torch.cat(out)


def entropy_from_logits(logits: torch.Tensor, chunk_size: int = 1) -> torch.Tensor:
    """Per-position entropy of softmax(logits), one row chunk at a time (no gradient needed).

    H = logsumexp(z) - sum_v p_v z_v: two vocabulary-sized temporaries per chunk (the softmax and
    logsumexp's own), where log_softmax -> exp -> product would need three.
    """
    out = []
    for rows in logits.split(chunk_size):
        rows = rows.float()
        probabilities = torch.softmax(rows, dim=-1)
        expected = torch.einsum("...v,...v->...", probabilities, rows)
        out.append(torch.logsumexp(rows, dim=-1) - expected)
    return torch.cat(out)


def token_advantages(
    rewards: torch.Tensor,
    completion_mask: torch.Tensor,
    group_size: int,
    scale_by_std: bool = True,
    sentence_mask: torch.Tensor | None = None,
    strict: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) advantages: group advantages broadcast over each response's tokens, FSPO-flipped
    when a sentence mask is given, and with `strict` (strict FSPO, `strict_unchecked`) no positive advantage for a
    response with no checked sentence. Also returns the (B, T) bool tensor of tokens the flip changed."""
    per_response = group_advantages(rewards, group_size, scale_by_std)
    advantages = per_response[:, None] * completion_mask.to(per_response.device, per_response.dtype)
    if sentence_mask is None:
        if strict:
            raise ValueError("strict FSPO needs a sentence mask: it is an option of the flip")
        return advantages, torch.zeros_like(advantages, dtype=torch.bool)
    sentence_mask = sentence_mask.to(advantages.dtype)
    flipped = fspo_flip(advantages, sentence_mask)
    changed = flipped != advantages
    if strict:
        flipped = strict_unchecked(flipped, sentence_mask)
    return flipped, changed


def reward_to_go(token_rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T) undiscounted returns G_t = sum over t' >= t of r_t' (gamma = 1), over real tokens only."""
    rewards = token_rewards * mask.to(token_rewards.dtype)
    return rewards.flip(-1).cumsum(-1).flip(-1) * mask.to(token_rewards.dtype)


def token_reward_advantages(
    token_rewards: torch.Tensor, mask: torch.Tensor, group_size: int, scale_by_std: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """(B, T) advantages from per-token rewards (RLFH in a GRPO-family trainer, docs/algorithms.md section 4).

    Each token's reward-to-go is normalised over the group: (G_t - mean) / (std + eps), where the mean
    and the sample std run over every real token of the group's G responses (no critic, as in GRPO).
    With scale_by_std=False only the mean is subtracted. Padding tokens get 0.
    """
    if token_rewards.shape != mask.shape or token_rewards.shape[0] % group_size != 0:
        raise ValueError(f"token_rewards {tuple(token_rewards.shape)} and mask {tuple(mask.shape)} must match, "
                         f"with a multiple of group_size={group_size} rows")
    mask = mask.to(token_rewards.dtype)
    returns = reward_to_go(token_rewards, mask)
    grouped_returns = returns.view(-1, group_size * returns.shape[1])
    grouped_mask = mask.view(-1, group_size * mask.shape[1])
    counts = grouped_mask.sum(dim=1, keepdim=True)
    mean = (grouped_returns * grouped_mask).sum(dim=1, keepdim=True) / counts.clamp(min=1.0)
    centred = (grouped_returns - mean) * grouped_mask
    if scale_by_std:
        variance = (centred**2).sum(dim=1, keepdim=True) / (counts - 1).clamp(min=1.0)
        centred = centred / (variance.sqrt() + eps)
    return centred.view_as(returns)
