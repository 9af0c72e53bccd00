"""The flip figure: one logged response's token advantages before FSPO's sentence-wise flip (GRPO's group advantage
on every token) and after it, with a caption that says where the first number comes from."""

from __future__ import annotations

from pathlib import Path

from fspo_lite.drivers.report.plots import pyplot, save_figure


def plot_flip(record: dict, path: str | Path | None = None):
    """One logged response: its per-token advantage before the flip (the group advantage on every token) and
    after (FSPO's sentence-wise flip), tokens on the x axis."""
    plt = pyplot()
    after = record["token_advantages"]
    before = [record["advantage"]] * len(after)
    fig, axes = plt.subplots(2, 1, figsize=(min(18, 2 + 0.16 * len(after)), 5), sharex=True, sharey=True)
    for ax, values, title in zip(axes, (before, after), ("before the flip (GRPO)", "after the flip (FSPO)")):
        ax.bar(range(len(values)), values, color=["#2ea043" if v > 0 else "#d73a49" for v in values])
        ax.axhline(0, color="black", linewidth=0.5)
        ax.set_ylabel("advantage")
        ax.set_title(title, fontsize=10)
    if len(after) <= 90:
        axes[1].set_xticks(range(len(after)))
        axes[1].set_xticklabels([t.replace("Ġ", " ").replace("Ċ", "\\n") for t in record["tokens"]], rotation=90,
                                fontsize=7)
    fig.suptitle(f"Q: {record['question']}  (gold: {', '.join(record['gold'][:2])}; reward {record['reward']:.2f})",
                 fontsize=10)
    from matplotlib.patches import Patch

    axes[0].legend(handles=[Patch(color="#2ea043", label="positive: the update makes the token more likely"),
                            Patch(color="#d73a49", label="negative: less likely")], fontsize=8, loc="upper right")
    fig.text(0.01, 0.005, flip_caption(record["reward"], record["advantage"]), fontsize=8, ha="left", va="bottom")
    fig.subplots_adjust(bottom=0.3 if len(after) <= 90 else 0.12)
    return save_figure(fig, path)


def flip_caption(reward: float, advantage: float) -> str:
    """Why the response's tokens start with the advantage they have: GRPO's advantage is the reward minus the group's
    mean (over its spread), so a reward of 0 is pushed up when the group's other answers did worse (a malformed one
    earns reward.format_penalty, below 0); FSPO then flips the sign of each sentence the verifier disagrees with."""
    side = "above" if advantage > 0 else "below" if advantage < 0 else "at"
    why = {"above": "it beat its group's mean", "below": "it fell below its group's mean",
           "at": "it equals its group's mean"}[side]
    return (f"Advantage before the flip {advantage:+.2f} = (reward {reward:.2f} - the group's mean) / the group's "
            f"spread: {why}. After: FSPO makes tokens of unsupported reasoning sentences negative and of supported "
            "ones positive.")
