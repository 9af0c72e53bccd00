"""Dynamic loss scaling for float16 training (the rule of torch.amp.GradScaler, decided on the global gradient norm).

In float16 the gradients of small losses underflow to zero in the backward pass. The loss is multiplied by `scale`
before `backward`, which lifts every gradient by the same factor, and the gradients are divided by it again before
clipping and the optimizer step, so the update is the unscaled one. A step whose gradients overflow (a non-finite
norm with a finite loss) is the scale's doing: it is skipped and the scale halved, without counting as a diverged
step; after `growth_interval` finite steps in a row the scale doubles. The overflow test reads the trainer's
clipped-norm, which DDP and FSDP compute over all ranks, so every rank skips the same steps (GradScaler checks
each device's own gradients and needs its sharded variant for that).

The trainer turns it on exactly when it computes in float16 on a GPU (fspo_lite.models.precision.needs_loss_scaling);
everywhere else it is disabled and leaves losses, gradients and checkpoints untouched.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

INITIAL_SCALE = 2.0**16
"""GradScaler's starting scale: large enough that few gradients underflow; a few early overflows halve it."""
GROWTH_INTERVAL = 2000
"""Finite steps in a row before the scale doubles (GradScaler's default)."""
MIN_SCALE = 1.0
"""Below this a non-finite gradient is not an overflow to scale away but a diverged step."""


@dataclass
class LossScale:
    """The scale, its growth counter, and whether scaling is on at all (see the module docstring)."""

    enabled: bool = False
    scale: float = INITIAL_SCALE
    growth_interval: int = GROWTH_INTERVAL
    good_steps: int = 0

    def scaled(self, loss):
        """The loss to call backward on."""
        return loss * self.scale if self.enabled else loss

    def unscale(self, parameters) -> None:
        """Divide the accumulated gradients by the scale (before clipping), in place."""
        if self.enabled:
            for parameter in parameters:
                if parameter.grad is not None:
                    parameter.grad.div_(self.scale)

    def overflowed(self, loss_finite: bool, grad_finite: bool) -> bool:
        """Whether a non-finite step is an overflow of the scaled gradients (skip it and halve the scale) rather
        than a diverged step: scaling is on, the loss is finite, and the scale can still shrink."""
        return self.enabled and loss_finite and not grad_finite and self.scale / 2 >= MIN_SCALE

    def step(self, optimizer) -> None:
        """The optimizer step of finite gradients; the scale doubles after growth_interval of them in a row."""
        optimizer.step()
        if self.enabled:
            self.good_steps += 1
            if self.good_steps >= self.growth_interval:
                self.scale, self.good_steps = self.scale * 2, 0

    def skipped(self, overflow: bool) -> None:
        """After a skipped step: halve the scale when it overflowed; either way the run of good steps starts over."""
        if self.enabled:
            self.scale, self.good_steps = self.scale / 2 if overflow else self.scale, 0

    def checkpoint_state(self) -> dict:
        """What a checkpoint keeps ({"loss_scale": ...} when enabled, else nothing, so other checkpoints are
        unchanged); `load_state_dict` takes its value back."""
        return {"loss_scale": asdict(self)} if self.enabled else {}

    def load_state_dict(self, state: dict) -> None:
        for key, value in state.items():
            setattr(self, key, value)
