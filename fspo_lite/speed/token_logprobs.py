"""Token log-probabilities and entropies in one pass over the vocabulary, with a backward pass of its own.

The reference formulas are `fspo_lite.algos.selective_log_softmax` and `entropy_from_logits`, differentiated by
autograd. `token_logprobs` gives the same forward numbers without the tempered (B, T, V) copy of the logits, and its
backward computes (onehot(token) - p) / temperature from the probabilities the forward pass kept, in place, instead
of autograd's chain through the division, the gather and the logsumexp: one vocabulary-sized tensor fewer at the
peak of the update's memory. Gradients agree with the reference to float rounding
(tests/test_speed_contract.py).
"""

from __future__ import annotations

import torch


class TokenLogProbs(torch.autograd.Function):
    """log softmax(logits / T)[tokens] and the entropy of softmax(logits / T), a few rows at a time, keeping the
    probabilities for the backward pass: d logp_t / d logits = (onehot(t) - p) / T."""

    @staticmethod
    def forward(ctx, logits, tokens, temperature, chunk_size, with_entropy):
        logps, entropies, probabilities = [], [], []
        for rows, row_tokens in zip(logits.split(chunk_size), tokens.split(chunk_size)):
            rows = rows if rows.dtype in (torch.float32, torch.float64) else rows.float()  # at least float32
            if temperature != 1.0:
                rows = rows / temperature
            norm = torch.logsumexp(rows, dim=-1)
            logps.append(rows.gather(-1, row_tokens.unsqueeze(-1)).squeeze(-1) - norm)
            if not (with_entropy or ctx.needs_input_grad[0]):
                continue
            rows = rows.sub_(norm.unsqueeze(-1)) if temperature != 1.0 or rows.dtype != logits.dtype else \
                rows - norm.unsqueeze(-1)  # log p (in place on a temporary, never on the caller's logits)
            chunk_p = rows.exp()
            if with_entropy:
                entropies.append(-(chunk_p * rows).sum(-1))
            if ctx.needs_input_grad[0]:
                probabilities.append(chunk_p)
        ctx.save_for_backward(torch.cat(probabilities) if probabilities else None, tokens)
        ctx.temperature, ctx.logits_dtype, ctx.spent = temperature, logits.dtype, False
        logp = torch.cat(logps)
        entropy = torch.cat(entropies) if with_entropy else logp.new_empty(0)
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy):
        if ctx.spent:
            raise RuntimeError("token_logprobs: the backward pass turns the kept probabilities into the gradient in "
                               "place, so it runs once (no retain_graph)")
        ctx.spent = True
        probabilities, tokens = ctx.saved_tensors
        grad = probabilities.mul_(-grad_logp.unsqueeze(-1))  # in place: one (B, T, V) tensor fewer at the peak
        grad.scatter_add_(-1, tokens.unsqueeze(-1), grad_logp.unsqueeze(-1))
        if ctx.temperature != 1.0:
            grad = grad.div_(ctx.temperature)
        return grad.to(ctx.logits_dtype), None, None, None, None


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0, with_entropy: bool = False,
                   chunk_size: int = 4) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log softmax(logits / temperature)[tokens], its entropy or None), shapes (B, T), in one pass over the
    vocabulary: `selective_log_softmax` of the tempered logits plus `entropy_from_logits`, without the tempered
    (B, T, V) copy, and with a backward pass that computes (onehot(token) - p) / temperature from the
    probabilities the forward pass kept instead of autograd's chain through the division, the gather and the
    logsumexp. The entropy carries no gradient (`entropy_from_logits` with a graph does, for an entropy bonus).
    """
    logp, entropy = TokenLogProbs.apply(logits, tokens, temperature, chunk_size, with_entropy)
    return logp, (entropy if with_entropy else None)  # the entropy is marked non-differentiable
