"""Batched sampling: how a token is drawn from a model's logits, and the plain decoding loop that draws them.

`sample` is the reference loop: the prompt run once, then one new token per row at every step, each an ordinary
forward call of the model on its own KV cache, every row computed until the last one ends (as `model.generate`
does), pad after a row's EOS. The faster loop of `fspo_lite.speed.decoding` draws the same tokens with the same
functions (`next_tokens`) and does less work.

Tokens are drawn (`draw_tokens`) as `model.generate` draws them by default (draw="multinomial": torch.multinomial,
one sample per row), so a seed gives `generate`'s tokens; draw="exponential_race" is the same distribution from other
random numbers, cheaper on a CPU (argmax of p / E over the vocabulary, E = -log U from uniform numbers;
docs/performance.md, "The token draw"). Either way the random numbers of a step form one table with a row for every
row of the batch, so each row's numbers keep their places whichever rows have ended. tests/test_decoding.py compares
the tokens with `model.generate`'s on the tiny and the bundled model.
"""

from __future__ import annotations

import torch

from fspo_lite.config import CHOICES
from fspo_lite.models.logprobs import prompt_positions
from fspo_lite.rollout.sampling import Sampling

LOGITS_SETTINGS = ("repetition_penalty", "encoder_repetition_penalty", "no_repeat_ngram_size",
                   "encoder_no_repeat_ngram_size", "min_length", "min_new_tokens", "bad_words_ids", "suppress_tokens",
                   "begin_suppress_tokens", "forced_bos_token_id", "forced_eos_token_id", "min_p", "typical_p",
                   "epsilon_cutoff", "eta_cutoff", "sequence_bias", "renormalize_logits",
                   "exponential_decay_length_penalty", "guidance_scale", "watermarking_config", "diversity_penalty")
"""Generation-config fields that make `generate` change the logits beyond temperature and top-p."""


def plain_sampling(generation_config) -> bool:
    """Whether a model's generation config leaves every LOGITS_SETTINGS field at transformers' default, so
    the decoding loops (temperature and top-p only) sample what `generate` would. A model whose config sets, e.g., a
    repetition penalty (Qwen2.5-Instruct: 1.05) is decoded with `generate`."""
    from transformers import GenerationConfig

    if generation_config is None:
        return True
    default = GenerationConfig()
    return all(getattr(generation_config, name, None) == getattr(default, name, None) for name in LOGITS_SETTINGS)


def process_logits(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Temperature, then top-p (nucleus) filtering, as transformers' TemperatureLogitsWarper and
    TopPLogitsWarper do: the smallest set of top tokens whose probability reaches top_p is kept (at least one),
    the rest set to -inf."""
    scores = logits / temperature if temperature != 1.0 else logits
    if top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=False)
        cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
        remove = cumulative <= (1 - top_p)
        remove[..., -1:] = False
        scores = scores.masked_fill(remove.scatter(1, order, remove), float("-inf"))
    return scores


DRAWS = CHOICES["rollout.draw"]
"""The ways `draw_tokens` draws (rollout.draw): the config's words, read from its one table."""


def race_tokens(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Row i's token: argmax over j of probs[i, j] / E[i, j], with E = -log(uniforms) exponential numbers (uniforms in
    [0, 1), the shape of probs). The exponential race: token j wins with probability probs[i, j] / sum(probs[i]), so
    rows need not be normalised, and a token of probability 0 never wins (a ratio of 0; a uniform of exactly 0 gives
    E = inf and a ratio of 0 too). It is torch.multinomial's own one-sample method with its exponential numbers made
    from uniform ones, which is cheaper on a CPU. A row with no positive total (NaN logits) is refused
    (`check_rows`)."""
    check_rows(probs)
    return (probs / uniforms.log().neg_()).argmax(dim=-1)


def check_rows(probs: torch.Tensor) -> None:
    """A ValueError, in one line, when a row of probabilities is not finite or sums to 0 (NaN logits): no token can
    be drawn from it."""
    totals = probs.sum(dim=-1)
    if not bool(((totals > 0) & torch.isfinite(totals)).all()):
        raise ValueError("cannot draw a token: a row of probabilities is not finite or sums to 0")


def draw_tokens(probs: torch.Tensor, draw: str = "multinomial") -> torch.Tensor:
    """One token per row of a (rows, vocabulary) probability table, from torch's default generator: multinomial
    (torch.multinomial, generate's draws) or exponential_race (`race_tokens` on a table of torch.rand numbers)."""
    if draw == "multinomial":
        check_rows(probs)
        return torch.multinomial(probs, num_samples=1).squeeze(1)
    if draw == "exponential_race":
        return race_tokens(probs, torch.rand(probs.shape, device=probs.device))
    raise ValueError(f"unknown draw {draw!r}; use one of {', '.join(DRAWS)}")


def next_tokens(logits: torch.Tensor, step: int, sampling: Sampling, eos: torch.Tensor, ended: torch.Tensor,
                pad_id: int, logprobs: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One decoding step's tokens from (rows, vocabulary) float logits: no EOS before sampling.min_new_tokens tokens
    (their logits set to -inf, as `generate`'s MinNewTokensLengthLogitsProcessor does), temperature and top-p
    (`process_logits`), then a draw (`draw_tokens`, as sampling.draw says) or, with sampling.do_sample=False, the
    argmax; pad for the rows that have `ended`. With logprobs, also each drawn token's log-probability under the
    processed scores it was drawn from (after temperature and top-p, as vLLM's processed log-probs), 0 for ended
    rows; else None."""
    if step < sampling.min_new_tokens:
        logits = logits.index_fill(1, eos, float("-inf"))
    scores = process_logits(logits, sampling.temperature, sampling.top_p) if sampling.do_sample else logits
    if sampling.do_sample:
        chosen = draw_tokens(torch.softmax(scores, dim=-1), sampling.draw)
    else:
        chosen = scores.argmax(dim=-1)
    chosen_logprobs = None
    if logprobs:
        chosen_logprobs = torch.log_softmax(scores, dim=-1).gather(1, chosen[:, None]).squeeze(1)
        chosen_logprobs = chosen_logprobs.masked_fill(ended, 0.0)
    return chosen.masked_fill(ended, pad_id), chosen_logprobs


def check_sampling(sampling: Sampling) -> None:
    """A ValueError for a sampling temperature of 0 or less (greedy decoding is do_sample=False)."""
    if sampling.do_sample and sampling.temperature <= 0:
        raise ValueError(f"sampling needs a temperature above 0, got {sampling.temperature}")


@torch.no_grad()
def sample(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, sampling: Sampling, pad_id: int,
           logprobs: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """New tokens (rows, steps) for left-padded prompts, drawn by `next_tokens` as `sampling` says; steps =
    sampling.max_new_tokens or fewer when every row has ended. The first step runs the whole prompt, each later one
    the row's last token on the model's KV cache; positions follow the mask. logprobs=True returns (tokens,
    log-probs) (`next_tokens`)."""
    check_sampling(sampling)
    rows, device = input_ids.shape[0], input_ids.device
    eos = torch.tensor(list(sampling.eos_ids), device=device)
    ended = torch.zeros(rows, dtype=torch.bool, device=device)
    step_ids, mask, positions, cache = input_ids, attention_mask, prompt_positions(attention_mask), None
    tokens, drawn_logprobs = [], []
    for step in range(sampling.max_new_tokens):
        output = model(input_ids=step_ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                       use_cache=True, logits_to_keep=1)
        cache = output.past_key_values
        chosen, chosen_logprobs = next_tokens(output.logits[:, -1].float(), step, sampling, eos, ended, pad_id,
                                              logprobs)
        tokens.append(chosen)
        drawn_logprobs.append(chosen_logprobs)
        ended = ended | torch.isin(chosen, eos)
        if bool(ended.all()):
            break
        step_ids = chosen[:, None]
        mask = torch.cat([mask, mask.new_ones(rows, 1)], dim=1)
        positions = positions[:, -1:] + 1
    drawn = torch.stack(tokens, dim=1) if tokens else input_ids.new_zeros(rows, 0)
    if not logprobs:
        return drawn
    return drawn, torch.stack(drawn_logprobs, dim=1) if drawn_logprobs else torch.zeros(rows, 0)
