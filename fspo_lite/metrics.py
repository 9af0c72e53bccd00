"""Per-step metrics to JSON lines (and TensorBoard when it is installed and asked for)."""

from __future__ import annotations

import json
import math
from pathlib import Path


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsLogger:
    """Appends one JSON object per step to `<output_dir>/metrics.jsonl`."""

    def __init__(self, output_dir: str | Path, tensorboard: bool = False):
        self.path = Path(output_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.writer = SummaryWriter(str(Path(output_dir) / "tensorboard"))
            except ImportError:
                print("[fspo_lite] tensorboard is not installed; logging to metrics.jsonl only")

    def log(self, metrics: dict) -> None:
        with open(self.path, "a") as handle:
            handle.write(json.dumps({k: _clean(v) for k, v in metrics.items()}) + "\n")
        if self.writer is not None:
            step = metrics.get("step", 0)
            for key, value in metrics.items():
                if isinstance(value, (int, float)) and key != "step" and math.isfinite(value):
                    self.writer.add_scalar(key, value, step)
            self.writer.flush()

    def truncate_after(self, step: int) -> None:
        """Drop rows logged after `step` (a resumed run rewrites them)."""
        if not self.path.exists():
            return
        kept = [line for line in self.path.read_text().splitlines() if line and json.loads(line).get("step", 0) <= step]
        self.path.write_text("".join(line + "\n" for line in kept))


def read_metrics(path: str | Path) -> list[dict]:
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
