"""A LoRA projection in one autograd node, for the training passes: y = x W^T + b + s (x A^T) B^T.

peft's LoRA layer computes the base product, the adapter's two small products, then `* scaling` and `+` on the whole
(tokens x out_features) output, and autograd runs the same two full-size element-wise operations again backwards
(the scaled gradient, and the sum of the input's two gradients). On a CPU those full-size passes can cost more than
the adapter's products (docs/performance.md). `lora_linear` folds the scale and the sum into the matrix products
(`addmm` with alpha = s onto the base product, forward and backward), the way Unsloth's LoRA kernels do, and keeps
the same tensors for the backward pass (x and x A^T).

One layer alone gives peft's outputs and gradients bit for bit when the scale is a power of two (the default
lora_alpha / lora_r = 32 / 16 = 2: the multiplications by s are exact). In a whole model the outputs stay the same
bit for bit, and the gradients agree to float rounding: where several projections read one input (q, k and v; gate
and up), autograd adds their input gradients in another grouping than peft's separate base and adapter terms
(tests/test_fused_lora.py).

`fused_lora(model)` swaps it in (speed.fused_lora), inside a `with` block, for every peft LoRA `Linear` whose adapter
is plain (one active adapter, no dropout, no DoRA or other variant, no LoRA bias, float weights of one dtype, a
frozen `nn.Linear` base); other layers keep peft's forward, and so does a layer whose adapter is switched off inside
the block (the reference pass) or that is called with peft's per-call arguments.
"""

from __future__ import annotations

import contextlib

import torch


class LoraLinear(torch.autograd.Function):
    """y = x W^T + b + s (x A^T) B^T, with the gradients of x, A and B (W and b are frozen)."""

    @staticmethod
    def forward(ctx, x, weight, bias, lora_a, lora_b, scaling: float):
        rows = x.reshape(-1, x.shape[-1])
        down = rows @ lora_a.t()  # (tokens, r)
        out = rows @ weight.t() if bias is None else torch.addmm(bias, rows, weight.t())
        out.addmm_(down, lora_b.t(), alpha=scaling)
        ctx.save_for_backward(rows, down, weight, lora_a, lora_b)
        ctx.scaling, ctx.shape = scaling, x.shape
        return out.view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad):
        rows, down, weight, lora_a, lora_b = ctx.saved_tensors
        scaling = ctx.scaling
        grad = grad.reshape(-1, grad.shape[-1])
        up = grad @ lora_b  # (tokens, r): the gradient at x A^T, before the scale
        grad_x = grad_a = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = (grad @ weight).addmm_(up, lora_a, alpha=scaling).view(ctx.shape)
        if ctx.needs_input_grad[3]:
            grad_a = (up.t() @ rows).mul_(scaling)
        if ctx.needs_input_grad[4]:
            grad_b = (grad.t() @ down).mul_(scaling)
        return grad_x, None, None, grad_a, grad_b, None


def lora_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, lora_a: torch.Tensor,
                lora_b: torch.Tensor, scaling: float) -> torch.Tensor:
    """x W^T + b + scaling (x A^T) B^T for x (..., in), W (out, in), A (r, in), B (out, r), in one autograd node:
    the frozen W and b get no gradient."""
    return LoraLinear.apply(x, weight, bias, lora_a, lora_b, float(scaling))


def plain_adapter(module) -> str | None:
    """The one active adapter of a peft LoRA `Linear` that `lora_linear` computes as peft would, or None (another
    layer kind, several adapters, dropout, a variant such as DoRA, a LoRA bias, fan-in-fan-out, mixed dtypes, a
    trainable or non-float base)."""
    from peft.tuners.lora import Linear as PeftLoraLinear

    if type(module) is not PeftLoraLinear:
        return None
    adapters = [name for name in module.active_adapters if name in module.lora_A]
    if len(adapters) != 1:
        return None
    name = adapters[0]
    base, lora_a, lora_b = module.get_base_layer(), module.lora_A[name], module.lora_B[name]
    if (type(base) is not torch.nn.Linear or base.weight.requires_grad or not base.weight.dtype.is_floating_point
            or name in module.lora_variant or module.lora_bias.get(name, False)
            or type(module.lora_dropout[name]) is not torch.nn.Identity or getattr(module, "fan_in_fan_out", False)
            or type(lora_a) is not torch.nn.Linear or type(lora_b) is not torch.nn.Linear
            or lora_a.bias is not None or lora_b.bias is not None
            or not lora_a.weight.dtype == lora_b.weight.dtype == base.weight.dtype):
        return None
    return name


def _fused_forward(module, name: str, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    if module.disable_adapters or module.merged or args or kwargs or x.dtype != module.lora_A[name].weight.dtype:
        return type(module).forward(module, x, *args, **kwargs)
    base = module.get_base_layer()
    return lora_linear(x, base.weight, base.bias, module.lora_A[name].weight, module.lora_B[name].weight,
                       module.scaling[name])


@contextlib.contextmanager
def fused_lora(model):
    """Inside: every plain LoRA layer of `model` (`plain_adapter`) computes with `lora_linear`. Yields the number
    of layers swapped (0 for a model without peft LoRA layers)."""
    swapped = []
    for module in model.modules():
        name = plain_adapter(module)
        if name is not None and "forward" not in vars(module):
            module.forward = lambda x, *args, _module=module, _name=name, **kwargs: _fused_forward(
                _module, _name, x, *args, **kwargs)
            swapped.append(module)
    try:
        yield len(swapped)
    finally:
        for module in swapped:
            del module.forward
