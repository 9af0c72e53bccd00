"""One decoding step of a Llama-style causal LM in plain torch calls, without the transformers module stack.

Part of a decoding step of SmolLM2-135M on 16 rows goes to the Python of transformers' modules (module calls,
mask building, attention dispatch, cache bookkeeping) rather than to its operators. `LlamaStep`
runs the same operators in the same order on the same tensors (RMSNorm in float32, rotary embedding from the
model's own rotary module, scaled-dot-product attention called as transformers' "sdpa" path calls it for one
query token, SiLU MLP, final norm, output layer on the last position), so the logits are the same numbers, and it
skips the rest. On a 2-core Xeon (2026-11-26) the benchmark's rollout (16 rows x 64 tokens of SmolLM2-135M) took
0.92x the wall time with the same answers (`python bench/prompt_prefix.py --setting fast_steps ...`,
docs/performance.md).

`llama_step(model)` returns None (`decode` then calls the model itself) unless every condition it needs holds:
a Llama, Mistral or Qwen2 causal LM with the "sdpa" attention, SiLU MLP, no sliding window, plain `nn.Linear`
projections (a peft LoRA layer counts only with its adapter off, as inside `merged_lora_weights`), no accelerate
hooks. `tests/test_llama_step.py` compares its logits with the model's, bit for bit, on tiny random Llama and
Qwen2 models, with and without padding, grouped and plain attention heads; `tests/test_decoding.py` compares
`decode`'s tokens (which use it) with `generate`'s on the bundled model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")
"""The causal LMs whose decoder layer is the one `LlamaStep` runs (pre-norm attention and SiLU MLP)."""


def _plain_linear(module) -> torch.nn.Linear | None:
    """The nn.Linear a projection computes with, or None when it computes anything else (an active adapter,
    a quantized or merged-in-place layer, a subclass)."""
    if type(module) is torch.nn.Linear:
        return module
    base = getattr(module, "base_layer", None)
    if (base is not None and type(base) is torch.nn.Linear and getattr(module, "disable_adapters", False)
            and not getattr(module, "merged", True)):
        return base
    return None


def _causal_lm(model):
    """The transformers causal LM under a peft wrapper (or the model itself)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def llama_step(model) -> "LlamaStep | None":
    """A LlamaStep for `model` as it is now, or None when the plain-torch step would not compute the model's
    own logits (see the module docstring)."""
    lm = _causal_lm(model)
    config = getattr(lm, "config", None)
    if type(lm).__name__ not in ARCHITECTURES or config is None:
        return None
    if (getattr(config, "_attn_implementation", None) != "sdpa" or getattr(config, "hidden_act", None) != "silu"
            or getattr(config, "use_sliding_window", False) or getattr(config, "sliding_window", None)
            or getattr(config, "pretraining_tp", 1) != 1):
        return None
    if any(hasattr(module, "_hf_hook") for module in lm.modules()):
        return None
    try:
        return LlamaStep(lm)
    except (AttributeError, TypeError, ValueError):
        return None


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' LlamaRMSNorm, operator for operator."""
    dtype = x.dtype
    x = x.to(torch.float32)
    variance = x.pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(variance + eps)
    return weight * x.to(dtype)


def _joined(linears) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One weight (and bias) for projections that read the same input: their rows stacked, so one matrix product
    gives their outputs side by side (the same numbers: each output is the same dot product)."""
    weight = torch.cat([linear.weight for linear in linears])
    biases = [linear.bias for linear in linears]
    if all(bias is None for bias in biases):
        return weight, None
    return weight, torch.cat([bias if bias is not None else weight.new_zeros(linear.weight.shape[0])
                              for bias, linear in zip(biases, linears)])


class LlamaStep:
    """Runs one decoding step on a cache of `PreallocatedLayer`s (`fspo_lite.rollout.decoding`) with the model's
    weights as they are when it is built (inside `merged_lora_weights`, the merged ones): q, k and v joined into one
    matrix, gate and up into another (copies: 0.28 GB for SmolLM2-135M while it decodes), so a layer runs four matrix
    products instead of seven and rotates queries and keys in one pass. Build it for one `decode` call; a weight
    changed afterwards is not seen."""

    def __init__(self, lm):
        inner = lm.model
        self.embed, self.rotary, self.norm = inner.embed_tokens, inner.rotary_emb, inner.norm
        head = _plain_linear(lm.lm_head)
        if head is None or type(self.embed) is not torch.nn.Embedding:
            raise ValueError("the output layer or the embedding is not plain")
        self.head = head
        self.layers = []
        for layer in inner.layers:
            attention, mlp = layer.self_attn, layer.mlp
            names = ("q_proj", "k_proj", "v_proj", "o_proj")
            linears = [_plain_linear(getattr(attention, n)) for n in names]
            linears += [_plain_linear(getattr(mlp, n)) for n in ("gate_proj", "up_proj", "down_proj")]
            if any(linear is None for linear in linears):
                raise ValueError("a projection is not a plain linear layer")
            q_proj, k_proj, v_proj, o_proj, gate, up, down = linears
            sizes = (q_proj.weight.shape[0], k_proj.weight.shape[0], v_proj.weight.shape[0])
            self.layers.append((layer.input_layernorm, layer.post_attention_layernorm, _joined(linears[:3]), sizes,
                                o_proj, _joined((gate, up)), gate.weight.shape[0], down, attention.head_dim,
                                attention.num_key_value_groups, attention.scaling))

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
               cache) -> torch.Tensor:
        """(rows, 1, vocabulary) logits of the last position for one new token per row; writes its keys and
        values into `cache` (one layer object with `update(keys, values) -> (keys, values)` per decoder layer)."""
        rows, length = input_ids.shape
        if length != 1:
            raise ValueError(f"LlamaStep decodes one token per row, got {length}")
        x = F.embedding(input_ids, self.embed.weight, self.embed.padding_idx)
        cos, sin = self.rotary(x, position_ids)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        # transformers' sdpa mask for one query token: None without padding, else the padding mask as booleans
        mask = None if bool(attention_mask.all()) else attention_mask.bool()[:, None, None, :]
        for index, (norm1, norm2, (qkv, qkv_bias), (q_size, k_size, _), o_proj, (gate_up, gate_up_bias),
                    gate_size, down, head_dim, groups, scale) in enumerate(self.layers):
            residual = x
            hidden = _rms_norm(x, norm1.weight, norm1.variance_epsilon)
            projected = F.linear(hidden, qkv, qkv_bias)
            # queries and keys side by side, (rows, query heads + key heads, 1, head_dim), rotated together
            query_key = projected[..., : q_size + k_size].reshape(rows, length, -1, head_dim).transpose(1, 2)
            query_key = (query_key * cos) + (_rotate_half(query_key) * sin)
            query, key = query_key[:, : q_size // head_dim], query_key[:, q_size // head_dim :]
            value = projected[..., q_size + k_size :].reshape(rows, length, -1, head_dim).transpose(1, 2)
            key, value = cache.layers[index].update(key, value)
            if groups > 1 and mask is None:
                out = F.scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, scale=scale,
                                                     is_causal=False, enable_gqa=True)
            elif groups > 1:  # one query token: the grouped heads become query rows of their key/value head
                out = F.scaled_dot_product_attention(query.reshape(rows, -1, groups, head_dim), key, value,
                                                     attn_mask=mask, dropout_p=0.0, scale=scale, is_causal=False)
            else:
                out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=0.0, scale=scale,
                                                     is_causal=False)
            out = out.reshape(out.shape[0], -1, length, value.shape[-1]).transpose(1, 2).contiguous()
            out = out.reshape(rows, length, -1).contiguous()
            x = residual + F.linear(out, o_proj.weight, o_proj.bias)
            residual = x
            hidden = _rms_norm(x, norm2.weight, norm2.variance_epsilon)
            gate_and_up = F.linear(hidden, gate_up, gate_up_bias)
            x = residual + F.linear(F.silu(gate_and_up[..., :gate_size]) * gate_and_up[..., gate_size:], down.weight,
                                    down.bias)
        x = _rms_norm(x[:, -1:, :], self.norm.weight, self.norm.variance_epsilon)
        return F.linear(x, self.head.weight, self.head.bias)
