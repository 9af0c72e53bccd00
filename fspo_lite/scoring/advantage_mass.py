"""Where the gradient goes: the share of a step's advantage mass on each kind of token (docs/gradient_mass.md).

Every completion token belongs to one region: a reasoning sentence the verifier supports, one it calls unsupported,
one it could not check, the final answer (inside <answer> </answer>), or other text (the tags, whitespace, and the
sentences of malformed responses, which get no verdicts). The policy-gradient loss weighs each token's
log-probability gradient by its advantage A, so sum |A| over a region's tokens is how much of the step's push lands
there, and sum A says in which direction: positive raises those tokens' probability, negative lowers it.

`advantage_mass` is the pure part (tensors in, numbers out); `token_regions` builds the region of every token from
the verdicts and the decoded responses.
"""

from __future__ import annotations

import torch

from fspo_lite.scoring.align import spans_to_token_values
from fspo_lite.scoring.verdicts import ResponseView, SentenceVerdicts
from fspo_lite.text import parse_response

REGIONS = ("supported", "unsupported", "unchecked", "answer", "other")
"""Region names in code order: token_regions writes 0 for supported ... 4 for other."""
_OTHER = REGIONS.index("other")


def advantage_mass(advantages: torch.Tensor, regions: torch.Tensor, completion_mask: torch.Tensor) -> dict[str, float]:
    """Per region r (REGIONS), over the real completion tokens (completion_mask 1):

    - `adv_abs_share/r` = sum_r |A| / sum_all |A|: the share of the step's advantage mass on r (they add up to 1);
    - `adv_signed_share/r` = sum_r A / sum_all |A|: the net push on r in the same unit (in [-1, 1]; positive:
      those tokens are made likelier);
    - `token_share/r` = tokens in r / all tokens, to read the two against.

    All are NaN when the step has no advantage mass (every group had equal rewards)."""
    if not (advantages.shape == regions.shape == completion_mask.shape):
        raise ValueError(f"shapes differ: advantages {tuple(advantages.shape)}, regions {tuple(regions.shape)}, "
                         f"mask {tuple(completion_mask.shape)}")
    real = completion_mask.detach().cpu().bool()
    a = advantages.detach().cpu().float()[real]
    r = regions.cpu()[real].long()
    total_abs, total_tokens = a.abs().sum().item(), r.numel()
    out = {}
    for code, name in enumerate(REGIONS):
        inside = r == code
        out[f"adv_abs_share/{name}"] = a[inside].abs().sum().item() / total_abs if total_abs > 0 else float("nan")
        out[f"adv_signed_share/{name}"] = a[inside].sum().item() / total_abs if total_abs > 0 else float("nan")
        out[f"token_share/{name}"] = inside.sum().item() / total_tokens if total_tokens else float("nan")
    return out


def token_regions(views: list[ResponseView], verdicts: list[SentenceVerdicts], width: int) -> torch.Tensor:
    """(N, width) region codes (REGIONS order) of every completion token: its reasoning sentence's verdict
    (+1 supported, -1 unsupported, 0 unchecked), the answer span, else other."""
    regions = torch.full((len(views), width), _OTHER, dtype=torch.long)
    code = {1: REGIONS.index("supported"), -1: REGIONS.index("unsupported"), 0: REGIONS.index("unchecked")}
    for row, (view, verdict) in enumerate(zip(views, verdicts)):
        spans = list(verdict.spans)
        values = [code[label] for label in verdict.labels]
        answer = parse_response(view.text).answer_span
        if answer is not None and answer[1] > answer[0]:
            spans.append(answer)
            values.append(REGIONS.index("answer"))
        order = sorted(range(len(spans)), key=lambda k: spans[k])
        if not order:
            continue
        tokens = spans_to_token_values(view.offsets, [spans[k] for k in order], [values[k] for k in order],
                                       default=_OTHER)[:width]
        regions[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
    return regions
