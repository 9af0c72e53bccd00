"""Progress bars that read done when a notebook is saved.

tqdm.auto draws an ipywidgets bar in any Jupyter kernel. A notebook executed without a front end (papermill,
nbclient) saves only that widget's first text, "0%", and that is what the saved notebook shows wherever no widget
runs (GitHub, a diff, a text editor). tqdm's text bar writes its states to stderr, and the executing client keeps
the text after the last carriage return (nbclient's coalesce_streams), so a saved text bar reads its final state:
"100%". `progress_bar` is the text bar when the environment variable FSPO_LITE_TEXT_PROGRESS is set (not "0"),
which the lite job (`fspo_lite.drivers.experiment.run_profile`) sets for the notebooks it executes, and tqdm.auto's
bar otherwise (a widget in a live notebook, text in a terminal).
"""

from __future__ import annotations

import contextlib
import os

TEXT_PROGRESS_ENV = "FSPO_LITE_TEXT_PROGRESS"
HEADLESS_ENV = {TEXT_PROGRESS_ENV: "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
"""The environment of a kernel that executes a notebook to be saved: fspo-lite's bars as text, and transformers'
and the hub's own bars (loading weights, downloads: tqdm.auto widgets that fspo-lite does not draw) off."""


def text_progress() -> bool:
    """Whether bars are drawn as text (FSPO_LITE_TEXT_PROGRESS set and not "0")."""
    return os.environ.get(TEXT_PROGRESS_ENV, "0").strip() not in ("", "0")


def progress_bar(*args, **kwargs):
    """A tqdm bar (tqdm's arguments): tqdm's text bar when `text_progress()`, else tqdm.auto's."""
    if text_progress():
        from tqdm.std import tqdm
    else:
        from tqdm.auto import tqdm
    return tqdm(*args, **kwargs)


@contextlib.contextmanager
def headless_progress():
    """`HEADLESS_ENV` set for the duration (a kernel started inside inherits it), then the earlier values again."""
    before = {key: os.environ.get(key) for key in HEADLESS_ENV}
    os.environ.update(HEADLESS_ENV)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
