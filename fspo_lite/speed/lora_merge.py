"""LoRA adapters at generation time: which adapters add plain scaling * B(A(x)), and their merge into new weights.

The fast transformers engine (`fspo_lite.speed.rollout`) either samples inside `merged_lora_weights` (each adapted
projection one matrix product on W + delta; speed.merge_lora_for_generation) or, with packed weights
(`fspo_lite.speed.llama_step`), runs the adapter's two small products beside the packed base product. Both are exact
only for plain adapters (`plain_lora_adapter`).
"""

from __future__ import annotations

import contextlib

import torch


def plain_lora_adapter(module, name: str) -> bool:
    """Whether adapter `name` of the peft LoRA layer `module` adds exactly scaling * B(A(x)) to its base layer's
    output: no variant (DoRA or another) and no LoRA bias. Merging it into the weight (`merged_lora_weights`) and
    running its two products beside a packed weight (`fspo_lite.speed.llama_step`) both hold only for such adapters."""
    return (getattr(module, "lora_variant", {}).get(name) is None and not getattr(module, "use_dora", {}).get(name)
            and not getattr(module, "lora_bias", {}).get(name, False))


def _lora_swaps(model) -> list[tuple[torch.nn.Linear, torch.Tensor, torch.Tensor]] | None:
    """(base layer, its weight, weight + delta in the weight's dtype: peft keeps the delta in float32) for every
    LoRA layer; None when some layer cannot be merged this way (quantized or non-linear base, DoRA or another
    variant, a LoRA bias, merged already). Every layer is checked before any delta is computed."""
    from peft.tuners.lora import LoraLayer

    layers = []
    for module in model.modules():
        if not isinstance(module, LoraLayer):
            continue
        base = module.get_base_layer()
        adapters = [a for a in module.active_adapters if a in module.lora_A]
        if (type(base) is not torch.nn.Linear or not base.weight.dtype.is_floating_point or module.merged
                or not all(plain_lora_adapter(module, a) for a in adapters)):
            return None
        if adapters:
            layers.append((module, base, adapters))
    return [(base, base.weight.data, (base.weight.data + sum(module.get_delta_weight(a) for a in adapters))
             .to(base.weight.dtype).detach()) for module, base, adapters in layers]


@contextlib.contextmanager
def merged_lora_weights(model):
    """Inside: every LoRA layer computes with W + delta in one matrix product and the adapter branch off.

    Generation runs the adapter's two extra small products per projection and token otherwise
    (docs/performance.md). W itself is
    never changed: the merged matrices are new tensors, swapped in and out, so the base weights (the
    KL reference) stay bit-identical, unlike peft's in-place merge/unmerge. Costs one extra copy of the
    adapted matrices while inside. Does nothing for models without LoRA or with layers it cannot
    merge this way (4-bit bases, DoRA).
    """
    swaps = _lora_swaps(model) if hasattr(model, "disable_adapter") else None
    if not swaps:
        yield
        return
    try:
        for base, _, merged in swaps:
            base.weight.data = merged
        with model.disable_adapter():
            yield
    finally:
        for base, original, _ in swaps:
            base.weight.data = original
