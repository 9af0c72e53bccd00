"""Build hook (everything else is in pyproject.toml): a wheel carries the bundled samples.

data/*.jsonl (under 1 MB) sits at the repository root, outside the package, so a plain wheel would lack it.
This copies it into the wheel as fspo_lite/bundled_data/, which `fspo_lite.data.examples.DATA_DIR` prefers when present;
a checkout or an editable install reads data/ directly. The committed difficulty-filter files (RESULT_FILES) go
there too, so notebook 03's default `filter_path` resolves from a wheel (`fspo_lite.data.training_set.bundled_or_given`).
So do the GPU constraints (requirements/gpu-constraints.txt), for the Colab install from an uploaded wheel.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


RESULT_FILES = ("results/filter_kbqa_smollm2.json", "results/filter_kbqa_smollm2_full.json")
GPU_CONSTRAINTS = "requirements/gpu-constraints.txt"  # read from a wheel by fspo_lite/drivers/colab_setup.py


class BuildPyWithData(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):  # editable installs read data/ in the checkout
            return
        target = Path(self.build_lib) / "fspo_lite" / "bundled_data"
        target.mkdir(parents=True, exist_ok=True)
        root = Path(__file__).resolve().parent
        named = (*RESULT_FILES, GPU_CONSTRAINTS)
        for path in [*sorted(root.joinpath("data").glob("*.jsonl")), *(root / name for name in named)]:
            if path.exists():
                shutil.copyfile(path, target / path.name)


setup(cmdclass={"build_py": BuildPyWithData})
