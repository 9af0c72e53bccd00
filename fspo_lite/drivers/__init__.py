"""The experiment drivers: what runs the library for an experiment, on top of the training and evaluation code.

- `experiment`: lite-job profiles and the notebook sequence under papermill (`python -m fspo_lite lite`);
- `runs`: notebook 03's runs: train and evaluate each method x seed, resumably (the study);
- `report`: the results of the lite job and the study (notebook 04);
- `playground`: the reward playground's logic (notebook 05);
- `base_samples`: the base model sampled k times per question and graded, cached per question; used by
  `filtering` (`python -m fspo_lite filter`), `prompt_sweep` (`sweep-prompts`) and `checklist` (`klcf-checklist`);
- `audit`: the blind audit of held-out sentences (`python -m fspo_lite audit`);
- `cli_help`: the command line's help (descriptions, examples, defaults, program name, --version).

Nothing below this package imports it (tests/test_architecture.py checks the layers).
"""
