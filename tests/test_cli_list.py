"""`fspo-lite list methods|verifiers|benchmarks|profiles`: every registry entry, one line each, read from the
registries (a new method, verifier, benchmark or profile is listed without an edit here)."""

import pytest

from fspo_lite.__main__ import main
from fspo_lite.drivers.experiment import profile_names
from fspo_lite.drivers.listing import arm_settings
from fspo_lite.evaluation.benchmarks import BENCHMARKS
from fspo_lite.scoring.methods import REWARD_METHODS
from fspo_lite.scoring.verifiers import VERIFIERS


@pytest.mark.parametrize("kind, names", [("methods", [*REWARD_METHODS, *arm_settings()]), ("verifiers", list(VERIFIERS)),
                                         ("benchmarks", list(BENCHMARKS)), ("profiles", list(profile_names()))])
def test_every_entry_is_listed_once_with_a_description(kind, names, capsys):
    assert main(["list", kind]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(names)
    assert all(len(line.split(maxsplit=1)) == 2 for line in lines)  # a description after every name


def test_the_flipped_methods_say_so(capsys):
    main(["list", "methods"])
    lines = dict(line.split(maxsplit=1) for line in capsys.readouterr().out.splitlines())
    assert lines["fspo"].startswith(lines["grpo"]) and "FSPO" in lines["fspo"] and "FSPO" not in lines["grpo"]
    assert "coin" in lines["random"] and "TruthRL" in lines["ternary"]


def test_the_study_arms_are_named_as_settings_and_the_method_error_points_there(capsys, tmp_path):
    main(["list", "methods"])
    lines = dict(line.split(maxsplit=1) for line in capsys.readouterr().out.splitlines())
    assert lines["corver"] == "a study arm, not a method: --set reward.method=fspo --set reward.step_reward_lambda=0.5"
    assert "--set verifier.name=kb" in lines["fspo+kb"] and "--set train.steps=32" in lines["grpo+4x"]
    assert main(["train", "--set", "reward.method=corver", "--set", f"train.output_dir={tmp_path}"]) == 1
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "corver, fspo+kb, grpo+4x are settings: `fspo-lite list methods`" in error


def test_the_study_profile_counts_three_held_out_judges():
    assert "three judges other than the training verifier" in profile_names()["study"]


def test_an_unknown_list_is_refused(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["list", "models"])
    assert stop.value.code == 2 and "invalid choice: 'models'" in capsys.readouterr().err


def test_a_reader_that_goes_away_is_not_an_error():
    """`fspo-lite list methods | head -1`: the reader leaves before the output is written; the command stops quietly
    with the shell's code for a closed pipe, no error line (before: `fspo_lite: error: BrokenPipeError`)."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written
    try:
        done = subprocess.run([sys.executable, "-m", "fspo_lite", "list", "methods"], stdout=write,
                              stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write)
    assert done.returncode == 141 and done.stderr == ""
