"""Writing figures: the one place the drivers save a PNG (the report's figures and the commands' figures)."""

from __future__ import annotations

from pathlib import Path


def save_png(fig, path: str | Path, tight_box: bool = False) -> Path:
    """Write `fig` to `path` at 120 dpi, its folder made; `tight_box` crops the image to what is drawn."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, **({"bbox_inches": "tight"} if tight_box else {}))
    return path


def headless_pyplot():
    """matplotlib.pyplot on the Agg backend, for the commands that draw a figure without a display."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_and_close(fig, path: str | Path) -> Path:
    """A command's figure: laid out, written to `path` (`save_png`) and closed; returns the path."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path = save_png(fig, path)
    plt.close(fig)
    return path
