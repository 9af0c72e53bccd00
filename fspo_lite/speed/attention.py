"""Grouped-query attention inside torch's kernel for the log-prob passes on a CPU.

Models with grouped-query attention (SmolLM2-135M: 9 query heads on 3 key/value heads) reach transformers' "sdpa"
attention with fewer key/value heads than query heads. When the call carries a mask (the log-prob passes always do:
left padding and the cached prompt), transformers copies every key/value head to its query heads (`repeat_kv`) before
`torch.nn.functional.scaled_dot_product_attention`, and autograd zero-fills and sums those copies again backwards. torch's
CPU kernel takes the grouped heads itself (`enable_gqa=True`), and transformers passes that flag for every call while
its TRANSFORMERS_SDPA_FORCE_GQA switch is "1". `grouped_query_sdpa` sets the switch inside a `with` block
(speed.grouped_query_sdpa); on a CPU the log-probs and gradients are the same numbers (tests/test_fused_lora.py), in
less time (docs/performance.md). Other devices are left alone: there a masked grouped call may fall back to a slower
kernel.
"""

from __future__ import annotations

import contextlib
import os

SWITCH = "TRANSFORMERS_SDPA_FORCE_GQA"
"""transformers' environment switch (transformers/integrations/sdpa_attention.py: `use_gqa_in_sdpa`)."""


@contextlib.contextmanager
def grouped_query_sdpa(device_type: str):
    """Inside, on device_type "cpu": transformers' sdpa attention passes grouped key/value heads to torch's kernel
    as they are. The switch's earlier value (or its absence) comes back on exit."""
    if device_type != "cpu":
        yield
        return
    before = os.environ.get(SWITCH)
    os.environ[SWITCH] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(SWITCH, None)
        else:
            os.environ[SWITCH] = before
