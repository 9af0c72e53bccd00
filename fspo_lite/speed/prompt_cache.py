"""Run each distinct prompt through the model once and give its keys/values to every row that repeats it.

A GRPO batch holds G responses per prompt, so the same prompt tokens appear G times, and with a
long prompt (system text, demonstrations) they are most of the tokens. Encoding each distinct
prompt once and copying its KV cache to its G rows gives the logits of the full pass (up to float
rounding, from the different batch shapes) at 1/G of the prompt's compute and activation memory.
Autograd follows the copies, so gradients reach the shared prompt pass and a LoRA update is the
same as with the full pass.

Used by the fast transformers engine (prefill before decoding: speed.share_prompt_prefill,
speed.share_prompt_prefix) and by the fast log-prob pass of the update (`fspo_lite.speed.logprobs`,
speed.share_prompt_pass). It needs a model that returns a KV cache: gradient checkpointing drops the
cache in training mode, so `uses_gradient_checkpointing` lets callers fall back to the full pass
(`shares_prompt_pass`: the whole decision for the update's passes).
"""

from __future__ import annotations

import torch

from fspo_lite.models.logprobs import prompt_positions

MIN_SHARED_PREFIX = 16
"""Shortest common prompt start worth a pass of its own (the rollout's prefill, the update's log-prob passes)."""


def distinct_prompts(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Group identical prompt rows.

    Returns (first, owner): `first[j]` is the first row holding distinct prompt j (in row order) and
    `owner[i]` the distinct prompt of row i, so `prompt_ids[first][owner] == prompt_ids`. None when
    no two rows share a prompt (nothing to save).
    """
    rows = prompt_ids.shape[0]
    if rows < 2:
        return None
    keys = torch.cat([prompt_ids, prompt_mask.to(prompt_ids.dtype)], dim=1)
    unique, inverse = torch.unique(keys, dim=0, return_inverse=True)
    if unique.shape[0] == rows:
        return None
    order = torch.arange(rows, device=keys.device)
    first = torch.full((unique.shape[0],), rows, dtype=torch.long, device=keys.device)
    first = first.scatter_reduce(0, inverse, order, reduce="amin")
    # renumber distinct prompts by first appearance, so `first` is in row order
    rank = torch.empty_like(first)
    rank[first.argsort()] = torch.arange(first.shape[0], device=keys.device)
    return first.sort().values, rank[inverse]


def select_cache_rows(cache, rows: torch.Tensor) -> None:
    """Keep (or repeat) the cache rows `rows`, in that order, as `cache.batch_select_indices` does, with
    `index_select` on the plain keys/values layers: its backward adds the rows' gradients with `index_add`, where
    the advanced indexing of transformers' layers scatters them with an accumulating `index_put`, much slower on a
    CPU; the same sums, in the same order. Other layer kinds (sliding windows' extra state, linear attention) go
    through their own method."""
    from transformers.cache_utils import DynamicLayer

    for layer in getattr(cache, "layers", None) or []:
        if type(layer) is not DynamicLayer:
            cache.batch_select_indices(rows)
            return
    for layer in cache.layers:
        if layer.get_seq_length() > 0:
            layer.keys, layer.values = layer.keys.index_select(0, rows), layer.values.index_select(0, rows)


def shared_prompt_pass(model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                       groups: tuple[torch.Tensor, torch.Tensor], logits_to_keep: int = 1):
    """Encode the distinct prompts once; return (KV cache with one row per input row, their last logits).

    The logits are those of the last `logits_to_keep` prompt positions, copied to every row like the cache.
    """
    first, owner = groups
    mask = prompt_mask[first]
    output = model(input_ids=prompt_ids[first], attention_mask=mask, position_ids=prompt_positions(mask),
                   use_cache=True, logits_to_keep=logits_to_keep)
    cache = output.past_key_values
    if cache is None:
        raise RuntimeError("the model returned no KV cache (gradient checkpointing on?); use the full pass")
    select_cache_rows(cache, owner)
    return cache, output.logits[owner]


def common_prefix_length(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> int:
    """How many tokens every row starts with (left-padded rows: the real tokens are the last mask.sum() columns)."""
    lengths = prompt_mask.sum(dim=1)
    shortest = int(lengths.min())
    if shortest == 0:
        return 0
    width = prompt_ids.shape[1]
    starts = width - lengths  # column of each row's first real token
    columns = starts[:, None] + torch.arange(shortest, device=prompt_ids.device)[None, :]
    aligned = prompt_ids.gather(1, columns)  # (rows, shortest): the first `shortest` real tokens of each row
    differs = (aligned != aligned[:1]).any(dim=0)
    return int(differs.float().argmax()) if bool(differs.any()) else shortest


def _start_cache(model, row: torch.Tensor, length: int):
    """The KV cache of the first `length` tokens of the one-row `row` (its real tokens from column 0), at positions
    0 .. length - 1: the shared start that `prefix_pass` and `shared_prefix_prefill` build on."""
    return model(input_ids=row[:, :length], use_cache=True, logits_to_keep=1,
                 position_ids=torch.arange(length, device=row.device)[None, :]).past_key_values


class PrefixPass:
    """The keys/values of the prompt start every row of a rollout shares, computed once for all its micro-batches
    (`prefix_pass` builds it).

    `keys_values` are detached leaves that each micro-batch's pass builds on; their gradients add up over the
    micro-batches, and `backward` then sends the sum through the one prefix pass, which thus runs forward and
    backward once per update instead of once per micro-batch. The gradient is the same sum, added in another
    order (float rounding)."""

    def __init__(self, length: int, computed: list[tuple[torch.Tensor, torch.Tensor]]):
        self.length = length
        self.computed = computed
        self.keys_values = [(keys.detach().requires_grad_(keys.requires_grad),
                             values.detach().requires_grad_(values.requires_grad)) for keys, values in computed]

    def cache(self, rows: int):
        """A transformers DynamicCache holding the prefix for `rows` rows (selected from the leaves)."""
        from transformers import DynamicCache

        cache = DynamicCache()
        for index, (keys, values) in enumerate(self.keys_values):
            cache.update(keys, values, index)
        select_cache_rows(cache, torch.zeros(rows, dtype=torch.long, device=self.keys_values[0][0].device))
        return cache

    def backward(self) -> None:
        """Send the gradients the micro-batches left on the leaves through the prefix pass (once)."""
        pairs = [(computed, leaf.grad) for computed_pair, leaf_pair in zip(self.computed, self.keys_values)
                 for computed, leaf in zip(computed_pair, leaf_pair) if leaf.grad is not None]
        if pairs:
            torch.autograd.backward([computed for computed, _ in pairs], [grad for _, grad in pairs])
        self.computed, self.keys_values = [], []


def prefix_pass(model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> PrefixPass | None:
    """One pass over the start all rows share (all prompt tokens but the last, as `completion_logprobs` splits
    them), or None when it is shorter than MIN_SHARED_PREFIX or the model's cache is not made of plain layers."""
    from transformers.cache_utils import DynamicLayer

    length = common_prefix_length(prompt_ids[:, :-1], prompt_mask[:, :-1])
    if length < MIN_SHARED_PREFIX:
        return None
    start = prompt_ids.shape[1] - int(prompt_mask[0].sum())
    cache = _start_cache(model, prompt_ids[:1, start:], length)
    layers = getattr(cache, "layers", None)
    if not layers or any(type(layer) is not DynamicLayer for layer in layers):
        return None
    return PrefixPass(length, [(layer.keys, layer.values) for layer in layers])


def shared_prefix_prefill(model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                          groups: tuple[torch.Tensor, torch.Tensor] | None, prefix: int,
                          shared_start: PrefixPass | None = None):
    """The KV cache of left-padded prompts (one row per input row, no gradient) computed in two passes: the
    `prefix` tokens every row starts with, once, then each distinct prompt's rest on top of it. Equal to the
    cache of one full pass up to float rounding: keys carry their position through the rotary embedding (positions
    follow the mask, as in `prompt_positions`), not their column, so the prefix's keys are moved, not recomputed.

    `groups`: `distinct_prompts` of the rows (None: every row is distinct). The rows must be left-padded, with
    their real tokens contiguous at the right, as the tokenizer writes them. `shared_start`: the first `prefix` tokens'
    keys/values computed already (`prefix_pass`, whose length must be `prefix`)."""
    first, owner = groups if groups is not None else (torch.arange(prompt_ids.shape[0]), None)
    ids, mask = prompt_ids[first], prompt_mask[first]
    rows, width = ids.shape
    device = ids.device
    lengths = mask.sum(dim=1)
    starts = width - lengths
    if shared_start is not None:
        if shared_start.length != prefix:
            raise ValueError(f"the prefix pass holds {shared_start.length} tokens, the rows share {prefix}")
        head = shared_start.cache(rows)
    else:
        head = _start_cache(model, ids[:1, starts[0] :], prefix)
        select_cache_rows(head, torch.zeros(rows, dtype=torch.long, device=device))
    rest = int((lengths - prefix).max())
    if rest > 0:  # each row's own tokens, right-padded after the shared prefix
        offsets = torch.arange(rest, device=device)[None, :]
        own_mask = (offsets < (lengths - prefix)[:, None]).long()
        columns = (starts[:, None] + prefix + offsets).clamp(max=width - 1)
        own_ids = ids.gather(1, columns).masked_fill(own_mask == 0, 0)
        model(input_ids=own_ids, past_key_values=head, use_cache=True, logits_to_keep=1,
              attention_mask=torch.cat([torch.ones(rows, prefix, dtype=mask.dtype, device=device), own_mask], dim=1),
              position_ids=(prefix + offsets).expand(rows, -1))
    # [prefix, own tokens, padding] -> [padding, prefix, own tokens]: roll each row right by its padding
    source = (torch.arange(width, device=device)[None, :] - starts[:, None]) % width
    for layer in head.layers:
        keys, values = layer.keys, layer.values
        if keys.shape[2] < width:  # no row fills the width (a batch padded to a wider one): zeros for padding
            fill = keys.new_zeros(keys.shape[0], keys.shape[1], width - keys.shape[2], keys.shape[3])
            keys, values = torch.cat([keys, fill], dim=2), torch.cat([values, fill], dim=2)
        index = source[:, None, :, None].expand(-1, keys.shape[1], -1, keys.shape[3])
        layer.keys, layer.values = keys.gather(2, index), values.gather(2, index)
    if owner is not None:
        select_cache_rows(head, owner)
    return head


def uses_gradient_checkpointing(model) -> bool:
    """True when any layer recomputes activations (such layers ignore the KV cache while training)."""
    return any(getattr(module, "gradient_checkpointing", False) is True for module in model.modules())


def shares_prompt_pass(config, world_size: int, model) -> bool:
    """Whether the trainer's log-prob passes encode each distinct prompt once (speed.share_prompt_pass): it
    needs the KV cache (no gradient checkpointing), a plain module (a DDP/FSDP wrapper expects one forward
    per backward, and FSDP wraps the model under torchrun with one process too: its backward would find the
    shared pass's weights already freed) and not Unsloth's patched forward with its own offloaded checkpointing."""
    return (config.speed.share_prompt_pass and world_size == 1 and not config.train.fsdp
            and config.model.backend != "unsloth" and not uses_gradient_checkpointing(model))
