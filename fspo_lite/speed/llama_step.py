"""One decoding step of a Llama-style causal LM in plain torch calls, without the transformers module stack.

Part of a decoding step of a small model goes to the Python of transformers' modules (module calls, mask building,
attention dispatch, cache bookkeeping) rather than to its operators. `LlamaStep` runs the same operators in the same
order on the same tensors (RMSNorm in float32, rotary embedding from the model's own rotary module,
scaled-dot-product attention called as transformers' "sdpa" path calls it for one query token, SiLU MLP, final norm,
output layer on the last position), so the logits are the same numbers, and it skips the rest
(`python bench/prompt_prefix.py --setting fast_steps`, docs/performance.md).

`llama_step(model)` returns None (`decode` then calls the model itself) unless every condition it needs holds:
a Llama, Mistral or Qwen2 causal LM with the "sdpa" attention, SiLU MLP, no sliding window, plain `nn.Linear`
projections (a peft LoRA layer counts only with its adapter off, as inside `merged_lora_weights`), no accelerate
hooks. `tests/test_llama_step.py` compares its logits with the model's, bit for bit, on tiny random Llama and
Qwen2 models, with and without padding, grouped and plain attention heads; `tests/test_speed_contract.py` compares
the fast decoding loop's tokens (which use it) with the reference loop's.

With `WeightPacks` (speed.packed_weights) its matrix products run on the model's frozen weights copied once,
and kept from one `decode` call to the next, into the layout of MKL's own matrix kernel (`cblas_sgemm_pack`, through
torch's `mkl::_mkl_linear`), which MKL reads faster at a decoding step's few rows than `F.linear`'s call on some
CPUs (`bench/packed_linear.py`, docs/performance.md). A LoRA adapter is then not merged into copies of the weights
before every rollout (`merged_lora_weights`): its two small products run beside the packed one (`Projection`). MKL
sums some products in another order and the adapter's term is added apart, so the logits equal the model's up to
float rounding instead of bit for bit (tested to 1e-5). `packing_applies(model)` says whether a model can decode so:
float32 weights on the CPU, a torch built with MKL (x86), plain LoRA adapters (no DoRA or other variant, no LoRA
bias).
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F

from fspo_lite.machine import cpuinfo
from fspo_lite.speed.allocator import made_apart
from fspo_lite.speed.lora_merge import plain_lora_adapter

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


def _adapted_linear(module) -> tuple[torch.nn.Linear, list[tuple[torch.Tensor, torch.Tensor, float]]] | None:
    """(base nn.Linear, adapters) for a projection that computes base(x) + the sum over adapters of
    scaling * x A^T B^T: no adapters for what `_plain_linear` takes; for a peft LoRA layer with its adapters on,
    (A's weight (r, in), B's weight (out, r), scaling) for each active one. None for anything else: a merged layer,
    a quantized or non-linear base, DoRA or another variant, a LoRA bias, dropout in training mode."""
    plain = _plain_linear(module)
    if plain is not None:
        return plain, []
    base = getattr(module, "base_layer", None)
    if (base is None or type(base) is not torch.nn.Linear or getattr(module, "merged", True)
            or getattr(module, "disable_adapters", True) or not hasattr(module, "lora_A")):
        return None
    adapters = []
    for name in module.active_adapters:
        if name not in module.lora_A:
            continue
        down, up = module.lora_A[name], module.lora_B[name]
        if (not plain_lora_adapter(module, name) or type(down) is not torch.nn.Linear
                or type(up) is not torch.nn.Linear or down.bias is not None or up.bias is not None
                or (module.training and not isinstance(module.lora_dropout[name], torch.nn.Identity))):
            return None
        adapters.append((down.weight, up.weight, float(module.scaling[name])))
    return base, adapters


def _causal_lm(model):
    """The transformers causal LM under a peft wrapper (or the model itself)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def _supported(lm) -> bool:
    """Whether `lm`'s architecture and settings are the ones LlamaStep computes (see the module docstring)."""
    config = getattr(lm, "config", None)
    if type(lm).__name__ not in ARCHITECTURES or config is None:
        return False
    if (getattr(config, "_attn_implementation", None) != "sdpa" or getattr(config, "hidden_act", None) != "silu"
            or getattr(config, "use_sliding_window", False) or getattr(config, "sliding_window", None)
            or getattr(config, "pretraining_tp", 1) != 1):
        return False
    return not any(hasattr(module, "_hf_hook") for module in lm.modules())


PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
               "mlp.up_proj", "mlp.down_proj")
"""A decoder layer's projections, as attribute paths."""


def packing_applies(model) -> bool:
    """Whether `llama_step(model, packs)` would run every product of a decoding step on packed weights: a
    supported model (`_supported`) whose projections and output layer are float32 on the CPU, plain or with plain
    LoRA adapters on (`_adapted_linear`), and a torch with MKL's packed product. Checks only, packs nothing."""
    lm = _causal_lm(model)
    if not (mkl_packing_available() and _supported(lm)):
        return False
    try:
        layers, head = lm.model.layers, _plain_linear(lm.lm_head)
        modules = [layer.get_submodule(path) for layer in layers for path in PROJECTIONS]
    except AttributeError:
        return False
    adapted = [_adapted_linear(module) for module in modules]
    if head is None or any(a is None for a in adapted):
        return False
    return all(w.device.type == "cpu" and w.dtype == torch.float32
               for w in [head.weight] + [base.weight for base, _ in adapted])


def llama_step(model, packs: "WeightPacks | None" = None, rows: int = 1) -> "LlamaStep | None":
    """A LlamaStep for `model` as it is now, or None when the plain-torch step would not compute the model's
    own logits (see the module docstring). packs: run the products on weights packed for MKL and kept in `packs`
    (packed for products of `rows` rows, the decoding batch; fewer rows still compute correctly), LoRA adapters on."""
    lm = _causal_lm(model)
    if not _supported(lm):
        return None
    try:
        return LlamaStep(lm, packs, rows)
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


def cpu_vendor() -> str | None:
    """The x86 vendor (GenuineIntel, AuthenticAMD, ...); None when /proc/cpuinfo names none."""
    return cpuinfo().get("vendor_id")


def wants_packed_weights(setting: bool | None) -> bool:
    """speed.packed_weights as decided: true or false as set; None (the default) packs on Intel CPUs only.

    MKL's packed product read SmolLM2's weights faster than `F.linear` at a decoding step's few rows on the Intel
    CPU measured and slower on the AMD one (docs/performance.md, "What each lever does"). A rule by vendor rather than
    a timing at start-up, so that one machine always decodes the same way."""
    return cpu_vendor() == "GenuineIntel" if setting is None else bool(setting)


def mkl_packing_available() -> bool:
    """Whether this torch has MKL's packed float32 product (`mkl::_mkl_linear`; x86 builds with MKL)."""
    return (torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_linear")
            and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight"))


class WeightPacks:
    """MKL-packed copies of weights, kept from one `decode` call to the next (one per model: `weight_packs_for`).

    A weight is packed again when it changes (its tensor's version counter moves: an optimizer step in full
    fine-tuning); LoRA's frozen base weights are packed once for the whole run. Costs one packed copy of every
    weight it is asked for for as long as it lives."""

    def __init__(self):
        self._packs: dict[tuple[int, ...], tuple] = {}

    def get(self, weights: list[torch.Tensor], rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(weight, packed) for the rows of `weights` stacked: the weight itself for one, else a stand-in of its
        shape that holds no memory (`mkl::_mkl_linear` reads only its shape and type); the packed copy made now, or
        kept from before if none of `weights` has changed since."""
        key = tuple(id(w) for w in weights)
        versions = tuple(w._version for w in weights)
        kept = self._packs.get(key)
        if kept is not None and kept[0] == versions and all(ref() is w for ref, w in zip(kept[1], weights)):
            return kept[2], kept[3]
        self._packs = {k: v for k, v in self._packs.items() if all(ref() is not None for ref in v[1])}  # gone weights
        def make() -> tuple[torch.Tensor, torch.Tensor]:
            joined = weights[0].detach() if len(weights) == 1 else torch.cat([w.detach() for w in weights])
            return joined, torch.ops.mkl._mkl_reorder_linear_weight(joined.contiguous(), max(1, rows))

        # kept for the run: not in the heap the training step reuses (fspo_lite.speed.allocator)
        joined, packed = made_apart(make)
        weight = joined if len(weights) == 1 else joined.new_zeros(()).expand(joined.shape)
        self._packs[key] = (versions, [weakref.ref(w) for w in weights], weight, packed)
        return weight, packed


_PACKS_BY_MODEL: "weakref.WeakKeyDictionary[torch.nn.Module, WeightPacks]" = weakref.WeakKeyDictionary()


def weight_packs_for(model) -> WeightPacks:
    """The `WeightPacks` of `model`'s causal LM: one for every engine that decodes with it (a trainer's and the
    evaluation harness's), dropped with the model."""
    lm = _causal_lm(model)
    packs = _PACKS_BY_MODEL.get(lm)
    if packs is None:
        packs = _PACKS_BY_MODEL[lm] = WeightPacks()
    return packs


def _low_rank(adapters: list[list[tuple[torch.Tensor, torch.Tensor, float]]],
              sizes: list[int]) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(down (r, in), up (out, r)) such that x down^T up^T is the sum of the adapters' terms of projections whose
    outputs are stacked (`sizes` rows each): every A stacked into down; the B's times their scaling placed block by
    block in up (zero where an adapter does not feed that projection). None without adapters."""
    flat = [(index, a, b, scaling) for index, group in enumerate(adapters) for a, b, scaling in group]
    if not flat:
        return None
    down = torch.cat([a.detach() for _, a, _, _ in flat])
    up = down.new_zeros(sum(sizes), down.shape[0])
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    column = 0
    for index, _, b, scaling in flat:
        up[starts[index] : starts[index] + sizes[index], column : column + b.shape[1]] = b.detach() * scaling
        column += b.shape[1]
    return down, up


class Projection:
    """x W^T + b, with W packed for MKL when `packed` is given (`WeightPacks.get`), plus a low-rank term
    x down^T up^T when `low_rank` is given (LoRA adapters left unmerged, `_low_rank`)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, packed: torch.Tensor | None = None,
                 low_rank: tuple[torch.Tensor, torch.Tensor] | None = None):
        self.weight, self.bias, self.packed, self.low_rank = weight, bias, packed, low_rank

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is None:
            out = F.linear(x, self.weight, self.bias)
        else:  # the row count given is the one torch compares with its own, so the packed product always runs
            out = torch.ops.mkl._mkl_linear(x, self.packed, self.weight, self.bias, x.numel() // x.shape[-1])
        if self.low_rank is not None:
            out = out + F.linear(F.linear(x, self.low_rank[0]), self.low_rank[1])
        return out


def _joined_bias(linears) -> torch.Tensor | None:
    """The biases of projections whose outputs are stacked, in the same order (zeros for a projection without
    one); None when none has a bias; one projection's own bias, uncopied."""
    biases = [linear.bias for linear in linears]
    if all(bias is None for bias in biases):
        return None
    if len(linears) == 1:
        return biases[0]
    return torch.cat([bias if bias is not None else linear.weight.new_zeros(linear.weight.shape[0])
                      for bias, linear in zip(biases, linears)])


def _joined(linears) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One weight (and bias) for projections that read the same input: their rows stacked, so one matrix product
    gives their outputs side by side (the same numbers: each output is the same dot product); one projection's own
    weight and bias, uncopied."""
    weight = linears[0].weight if len(linears) == 1 else torch.cat([linear.weight for linear in linears])
    return weight, _joined_bias(linears)


class LlamaStep:
    """Runs one decoding step on a cache of `PreallocatedLayer`s (`fspo_lite.speed.decoding`) with the model's
    weights as they are when it is built. Without packs (inside `merged_lora_weights`, the merged weights): q, k
    and v joined into one matrix, gate and up into another (copies of those weights while it decodes), so
    a layer runs four matrix products instead of seven and rotates queries and keys in one pass. With `packs`: the
    same four products on the joined weights packed for MKL (kept in `packs`, no copy made per call), each LoRA
    adapter's term added beside them. Build it for one `decode` call; a weight changed afterwards is not seen."""

    def __init__(self, lm, packs: WeightPacks | None = None, rows: int = 1):
        inner = lm.model
        self.embed, self.rotary, self.norm = inner.embed_tokens, inner.rotary_emb, inner.norm
        head = _plain_linear(lm.lm_head)
        if head is None or type(self.embed) is not torch.nn.Embedding:
            raise ValueError("the output layer or the embedding is not plain")

        def projection(group: list) -> Projection:
            """One product for the projections of `group` ((base, adapters) pairs reading the same input)."""
            bases = [base for base, _ in group]
            if packs is None:
                return Projection(*_joined(bases))
            if not all(b.weight.device.type == "cpu" and b.weight.dtype == torch.float32 for b in bases):
                raise ValueError("only float32 weights on the CPU can be packed")
            weight, packed = packs.get([b.weight for b in bases], rows)
            low_rank = _low_rank([adapters for _, adapters in group], [b.weight.shape[0] for b in bases])
            return Projection(weight, _joined_bias(bases), packed, low_rank)

        self.head = projection([(head, [])])
        self.layers = []
        for layer in inner.layers:
            if packs is None:
                linears = [_plain_linear(layer.get_submodule(path)) for path in PROJECTIONS]
                adapted = [(linear, []) if linear is not None else None for linear in linears]
            else:
                adapted = [_adapted_linear(layer.get_submodule(path)) for path in PROJECTIONS]
            if any(a is None for a in adapted):
                kinds = "a plain linear layer" + (" or a plain LoRA layer" if packs else "")
                raise ValueError(f"a projection is not {kinds}")
            q_proj, k_proj, v_proj, _, gate, _, _ = [base for base, _ in adapted]
            sizes = (q_proj.weight.shape[0], k_proj.weight.shape[0], v_proj.weight.shape[0])
            attention = layer.self_attn
            self.layers.append((layer.input_layernorm, layer.post_attention_layernorm, projection(adapted[:3]), sizes,
                                projection(adapted[3:4]), projection(adapted[4:6]), gate.weight.shape[0],
                                projection(adapted[6:7]), attention.head_dim, attention.num_key_value_groups,
                                attention.scaling))

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
        for index, (norm1, norm2, qkv, (q_size, k_size, _), o_proj, gate_up,
                    gate_size, down, head_dim, groups, scale) in enumerate(self.layers):
            residual = x
            hidden = _rms_norm(x, norm1.weight, norm1.variance_epsilon)
            projected = qkv(hidden)
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
            x = residual + o_proj(out)
            residual = x
            hidden = _rms_norm(x, norm2.weight, norm2.variance_epsilon)
            gate_and_up = gate_up(hidden)
            x = residual + down(F.silu(gate_and_up[..., :gate_size]) * gate_and_up[..., gate_size:])
        x = _rms_norm(x[:, -1:, :], self.norm.weight, self.norm.variance_epsilon)
        return self.head(x)
