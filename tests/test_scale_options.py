"""Small checks of the scale-path settings: the lite job's --set reaching notebook 03."""

import pytest

from fspo_lite.config import ConfigError, parse_overrides
from fspo_lite.experiment import load_profile, with_training_overrides


def test_lite_set_reaches_the_training_notebook_overrides():
    profile = load_profile("quick")
    changed = with_training_overrides(profile, parse_overrides(["model.load_in_4bit=true", "train.micro_batch_size=2"]))
    parameters = dict(changed.notebooks)
    assert parameters["03_train_fspo.ipynb"]["overrides"] == {"model.load_in_4bit": True, "train.micro_batch_size": 2}
    assert parameters["01_measure_hallucination.ipynb"] == dict(profile.notebooks)["01_measure_hallucination.ipynb"]
    assert with_training_overrides(profile, {}) is profile


def test_lite_set_rejects_unknown_keys():
    with pytest.raises(ConfigError):
        parse_overrides(["model.load_in_5bit=true"])
