"""The notebooks as a person uses them: JupyterLab in a real (headless) Chromium, driven by Playwright.

`make test-browser` installs what this needs (Debian's chromium, the `browser` extra) and runs it. JupyterLab is
started from this environment on 127.0.0.1 with a random token, in a scratch folder holding copies of the notebooks
(so autosave never writes outputs into notebooks/). The tests then, through the page only:

- 05: run all cells, drag two reward sliders (reward.step_reward_lambda, detail.weight), pick another method and every
  example in the dropdowns; the reward table and the bar chart under the sliders must become what
  `fspo_lite.drivers.playground` computes for those settings (the update times are printed, not asserted);
- 02: run all cells, label two sentences (and type a note) with the labeling tool, press Save; the file must hold them;
- 01 and 04: open the executed copies of a quick-profile run; every figure must render, no output may be an error.

Set FSPO_SCREENSHOTS=docs/images to (re)write the README's screenshots of the playground and the labeling tool.
Skips with the reason when Playwright or a Chromium binary is missing (CHROMIUM=/path/to/chromium to name one), and
in any run that does not select the `browser` marker (tests/conftest.py): about 5 minutes on 2 CPU cores, too long
for `make test`.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
SCREENSHOTS = os.environ.get("FSPO_SCREENSHOTS")
RUN_TIMEOUT_MS = 300_000

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def find_chromium() -> str | None:
    named = os.environ.get("CHROMIUM")
    if named:
        return named if Path(named).exists() else None
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_settings(folder: Path) -> None:
    """JupyterLab user settings for the test: no news or update pop-ups, every cell kept in the page."""
    settings = {"@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
                "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"}}
    for name, values in settings.items():
        path = folder / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on 127.0.0.1 with a token, rooted in a scratch copy of notebooks/ (data/ linked)."""
    if not find_chromium():
        pytest.skip("no Chromium binary found (apt-get install chromium, or CHROMIUM=/path); `make test-browser` "
                    "installs it")
    pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install -e '.[browser]'; "
                                                      "`make test-browser` does it)")
    pytest.importorskip("jupyterlab", reason="JupyterLab is not installed (the `notebooks` extra)")
    root = tmp_path_factory.mktemp("lab")
    shutil.copytree(ROOT / "notebooks", root / "notebooks")
    (root / "data").symlink_to(ROOT / "data")
    write_settings(root / ".settings")
    port, token = free_port(), secrets.token_hex(16)
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(root / ".settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(root / ".workspaces"), HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    log = open(root / "jupyterlab.log", "w")
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            if server.poll() is not None:
                pytest.fail(f"JupyterLab exited: {(root / 'jupyterlab.log').read_text()[-2000:]}")
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("JupyterLab did not answer within 2 minutes")
        yield {"url": url, "token": token, "root": root}
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@pytest.fixture(scope="module")
def browser(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        chromium = driver.chromium.launch(executable_path=find_chromium(), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1500, "height": 2600 if SCREENSHOTS else 1100})
    page = context.new_page()
    page.set_default_timeout(60_000)
    yield page
    context.close()


PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"  # the notebook on screen (hidden tabs stay in the page)


def open_notebook(page, lab, path: str) -> None:
    """Open the notebook in a workspace of its own: JupyterLab would otherwise restore the notebooks an earlier
    test opened, as hidden tabs whose cells and outputs are in the page too."""
    lab["opened"] = lab.get("opened", 0) + 1
    page.goto(f"{lab['url']}/lab/workspaces/test{lab['opened']}/tree/{path}?token={lab['token']}")
    page.wait_for_selector(f"{PANEL} .jp-Notebook .jp-Cell")
    page.wait_for_selector(".jp-StatusBar-Widget:has-text('Idle')")  # the kernel is up


def run_all(page) -> None:
    """Run > Run All Cells, then wait until every code cell has an execution count."""
    page.click(".lm-MenuBar-itemLabel:text-is('Run')")
    page.click(".lm-Menu-itemLabel:text-is('Run All Cells')")
    page.wait_for_function("""() => {
        const prompts = [...document.querySelectorAll('PANEL .jp-CodeCell .jp-InputArea-prompt')];
        return prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
    }""".replace("PANEL", PANEL), polling=200, timeout=RUN_TIMEOUT_MS)
    page.wait_for_selector(".jp-StatusBar-Widget:has-text('Idle')")


def page_problems(page) -> list[str]:
    """Error outputs (tracebacks), widgets that did not render, and images that did not decode."""
    return page.evaluate("""() => {
        const problems = [];
        for (const out of document.querySelectorAll('PANEL .jp-OutputArea-output')) {
            const text = out.innerText || '';
            if (text.includes('Traceback (most recent call last)') || /^\\w*(Error|Exception)\\b.*Traceback/m.test(text))
                problems.push('error output: ' + text.slice(0, 300));
            if (text.includes('Error displaying widget') || text.includes('Loading widget'))
                problems.push('widget not rendered: ' + text.slice(0, 200));
        }
        for (const img of document.querySelectorAll('PANEL .jp-OutputArea-output img'))
            if (!img.complete || img.naturalWidth === 0) problems.push('image did not render');
        return problems;
    }""".replace("PANEL", PANEL))


def shot(locator, name: str) -> None:
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        locator.screenshot(path=str(Path(SCREENSHOTS) / name))


# ---------------------------------------------------------------- 05: the reward playground

def table_rows(view) -> list[list[str]]:
    """The reward table under the sliders, as text: header row, then one row per response."""
    table = view.locator("table").first
    header = [cell.strip() for cell in table.locator("thead tr").first.locator("th").all_inner_texts()]
    rows = [[cell.strip() for cell in row.locator("th, td").all_inner_texts()] for row in table.locator("tbody tr").all()]
    return [header, *rows]


def same_table(shown: list[list[str]], expected) -> bool:
    """The page's table against reward_table(...): same columns and rows, numbers equal to 5 digits."""
    header, *rows = shown
    if [c for c in header if c] != list(expected.columns) or len(rows) != len(expected):
        return False
    for (index, *cells), (key, row) in zip(rows, expected.iterrows()):
        if int(index) != key:
            return False
        for text, value in zip(cells, row.tolist()):
            if isinstance(value, float):
                if abs(float(text) - value) > 1e-5 * max(1.0, abs(value)):
                    return False
            elif text != str(value):
                return False
    return True


def expected_png(result, index: int) -> bytes:
    """The bar chart as the kernel's inline backend renders it (same rc and print_figure settings)."""
    import matplotlib

    matplotlib.use("agg")
    import matplotlib.pyplot as plt
    from IPython.core.pylabtools import print_figure
    from matplotlib_inline.config import InlineBackend

    from fspo_lite.drivers.playground import plot_token_advantages

    backend = InlineBackend()
    with matplotlib.rc_context(backend.rc):
        figure = plot_token_advantages(result, min(index, len(result.tokens) - 1))
        data = print_figure(figure, "png", **backend.print_figure_kwargs)
        plt.close(figure)
    return data


def page_png(view) -> bytes:
    source = view.locator("img").first.get_attribute("src")
    assert source.startswith("data:image/png;base64,"), source[:60]
    return base64.b64decode(source.split(",", 1)[1])


def same_pixels(a: bytes, b: bytes) -> bool:
    import matplotlib.image

    first, second = matplotlib.image.imread(io.BytesIO(a)), matplotlib.image.imread(io.BytesIO(b))
    return first.shape == second.shape and abs(first - second).max() < 1e-6


STATE_JS = "el => [el.querySelector('table')?.innerText ?? null, el.querySelector('img')?.src ?? null]"


def view_state(view) -> list:
    """The text of the reward table and the source of the bar chart under the sliders."""
    return view.evaluate(STATE_JS)


def wait_for_change(view, before: list) -> float:
    """Seconds until both the table and the bar chart under the sliders differ from `before` (polled by the page
    every 20 ms: the update time a person sees; not at animation frames, which a headless page may never draw)."""
    start = time.perf_counter()
    view.page.wait_for_function(f"""([el, before]) => {{
        const [table, image] = ({STATE_JS})(el);
        return table !== null && image !== null && table !== before[0] && image !== before[1];
    }}""", arg=[view.element_handle(), before], polling=20, timeout=60_000)
    return time.perf_counter() - start


def drag_slider(page, box, section: str, key: str, fraction: float) -> float:
    """Open the accordion section, drag the slider's handle to `fraction` of its track with the mouse, and
    return the value its readout then shows."""
    box.locator(f".jupyter-widget-Collapse-header:has-text('{section}')").click()
    slider = box.locator(f".widget-slider:has(label:text-is('{key}'))")
    handle, track = slider.locator(".noUi-handle"), slider.locator(".noUi-target")
    handle.wait_for()
    track_box, handle_box = track.bounding_box(), handle.bounding_box()
    y = handle_box["y"] + handle_box["height"] / 2
    page.mouse.move(handle_box["x"] + handle_box["width"] / 2, y)
    page.mouse.down()
    page.mouse.move(track_box["x"] + fraction * track_box["width"], y, steps=8)
    page.mouse.up()
    return float(slider.locator(".widget-readout").inner_text())


def test_playground_sliders_update_table_and_plot(lab, page):
    from fspo_lite.config import Config
    from fspo_lite.drivers.experiment import notebook_parameters
    from fspo_lite.models.policy import load_tokenizer
    from fspo_lite.drivers.playground import compute_playground, load_items, reward_table
    from fspo_lite.scoring.verifiers import build_verifier

    open_notebook(page, lab, "notebooks/05_reward_playground.ipynb")
    run_all(page)
    assert page_problems(page) == []
    box = page.locator(".widget-vbox:has(> .widget-dropdown:has-text('method'))").last
    view = box.locator(".widget-output")
    view.locator("table").wait_for()
    view.locator("img").wait_for()

    items, tokenizer = load_items(), load_tokenizer("smollm2-135m")
    verifier = build_verifier(Config().verifier)
    defaults = notebook_parameters("05_reward_playground.ipynb")  # the notebook's parameters cell
    item_index, response_index = int(defaults["item_index"]), int(defaults["response_index"])
    default = compute_playground(items[item_index], tokenizer, "fspo", verifier=verifier)
    shown = table_rows(view)
    assert same_table(shown, reward_table(default)), (shown, reward_table(default))
    assert same_pixels(page_png(view), expected_png(default, response_index))

    # open the "reward" section and drag reward.step_reward_lambda about two thirds along its track
    before = view_state(view)
    step_lambda = drag_slider(page, box, "reward", "reward.step_reward_lambda", 0.66)
    slider_seconds = wait_for_change(view, before)
    assert step_lambda > 0
    settings = {"reward.step_reward_lambda": step_lambda}
    shaped = compute_playground(items[item_index], tokenizer, "fspo", settings, verifier=verifier)
    assert shaped.rewards != default.rewards
    shown = table_rows(view)
    assert same_table(shown, reward_table(shaped)), (shown, reward_table(shaped))
    assert same_pixels(page_png(view), expected_png(shaped, response_index))

    # the detail term's weight: its bonus joins the reward, and its columns the table
    before = view_state(view)
    settings["detail.weight"] = drag_slider(page, box, "detail", "detail.weight", 0.4)
    detail_seconds = wait_for_change(view, before)
    assert settings["detail.weight"] > 0
    detailed = compute_playground(items[item_index], tokenizer, "fspo", settings, verifier=verifier)
    shown = table_rows(view)
    assert "detail_bonus" in shown[0] and same_table(shown, reward_table(detailed)), (shown, reward_table(detailed))
    assert same_pixels(page_png(view), expected_png(detailed, response_index))
    shot(box, "playground.png")

    # another method in the dropdown: caution keeps the sliders' values (it reads no step reward)
    before = view_state(view)
    box.locator(".widget-dropdown:has(label:text-is('method')) select").select_option("caution")
    dropdown_seconds = wait_for_change(view, before)
    caution = compute_playground(items[item_index], tokenizer, "caution", settings, verifier=verifier)
    shown = table_rows(view)
    assert same_table(shown, reward_table(caution)), (shown, reward_table(caution))
    assert "category" in shown[0]
    assert same_pixels(page_png(view), expected_png(caution, response_index))

    # every bundled example through the example dropdown (the update time of each is printed)
    example_seconds = []
    for index in range(len(items)):
        if index == item_index:
            continue
        before = view_state(view)
        box.locator(".widget-dropdown:has(label:text-is('example')) select").select_option(index=index)
        example_seconds.append(wait_for_change(view, before))
        expected = compute_playground(items[index], tokenizer, "caution", settings, verifier=verifier)
        assert same_table(table_rows(view), reward_table(expected)), index
    assert page_problems(page) == []
    print(f"\nplayground update in the browser, example dropdown over the other bundled examples: "
          + ", ".join(f"{t:.2f}" for t in example_seconds) + " s")
    print(f"playground update in the browser (bundled example {item_index}): step_reward_lambda slider -> new table "
          f"and plot {slider_seconds:.2f} s, detail.weight slider {detail_seconds:.2f} s, method dropdown "
          f"{dropdown_seconds:.2f} s")


# ---------------------------------------------------------------- 02: the labeling tool

def parameterized_copy(source: Path, target: Path, parameters: dict) -> None:
    """The notebook with its parameters cell overridden (papermill's own injection), as a person would edit it."""
    import nbformat
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    notebook = parameterize_notebook(load_notebook_node(str(source)), parameters)
    nbformat.write(notebook, target)


def test_labeling_tool_saves_what_was_clicked(lab, page):
    root = lab["root"]
    parameterized_copy(root / "notebooks" / "02_verifier_labeling.ipynb", root / "notebooks" / "02_small.ipynb",
                       {"num_questions": 2, "samples_per_question": 1, "max_new_tokens": 64,
                        "verifier_names": ["lexical"], "labels_out": "runs/labels.jsonl"})
    open_notebook(page, lab, "notebooks/02_small.ipynb")
    run_all(page)
    assert page_problems(page) == []
    out_file = root / "runs" / "labels.jsonl"
    saved = [json.loads(line) for line in out_file.read_text().splitlines()]  # the last cell saves them unlabeled
    assert len(saved) >= 2 and all(row["label"] is None for row in saved), saved

    tool = page.locator(".widget-vbox:has(> .widget-toggle-buttons)").last
    tool.locator(".widget-toggle-button:text-is('supported')").click()
    tool.locator(".widget-text input").fill("stated in the evidence")
    tool.locator("button:text-is('next >')").click()
    page.wait_for_function("el => el.innerText.includes('2/')", arg=tool.locator(".widget-html").element_handle(),
                           polling=50, timeout=60_000)
    tool.locator(".widget-toggle-button:text-is('unsupported')").click()
    tool.locator("button:text-is('< prev')").click()  # back to the first: its label and note must survive
    page.wait_for_function("el => el.innerText.includes('1/')", arg=tool.locator(".widget-html").element_handle(),
                           polling=50, timeout=60_000)
    assert tool.locator(".widget-text input").input_value() == "stated in the evidence"
    tool.locator("button:text-is('Save')").click()
    tool.locator(".widget-label:has-text('saved')").wait_for()
    shot(tool, "labeling.png")

    saved = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert [row["label"] for row in saved[:2]] == ["supported", "unsupported"]
    assert [row["notes"] for row in saved[:2]] == ["stated in the evidence", ""]
    assert all(row["label"] is None for row in saved[2:])
    assert page_problems(page) == []


# ---------------------------------------------------------------- 01 and 04 after a quick-profile run

def test_quick_run_notebooks_show_their_figures(lab, page):
    pytest.importorskip("papermill")
    out = lab["root"] / "quick"
    env = dict(os.environ, HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    done = subprocess.run([sys.executable, "-m", "fspo_lite", "lite", "--profile", "quick", "--out", str(out),
                           "--quiet"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for name, least in (("01_measure_hallucination.ipynb", 2), ("04_results.ipynb", 3)):
        executed = out / "results" / "notebooks" / name
        stored = sum("image/png" in output.get("data", {}) for cell in json.loads(executed.read_text())["cells"]
                     for output in cell.get("outputs", []))
        open_notebook(page, lab, f"quick/results/notebooks/{name}")
        images = page.locator(f"{PANEL} .jp-OutputArea-output img")
        images.first.wait_for()
        page.wait_for_function(f"() => [...document.querySelectorAll('{PANEL} .jp-OutputArea-output img')]"
                               ".every(i => i.complete)", polling=100, timeout=60_000)
        assert images.count() == stored >= least, (name, images.count(), stored)
        assert page_problems(page) == [], name
        sizes = page.evaluate(f"() => [...document.querySelectorAll('{PANEL} .jp-OutputArea-output img')]"
                              ".map(i => [i.naturalWidth, i.naturalHeight])")
        assert all(w > 100 and h > 100 for w, h in sizes), (name, sizes)
