"""An fspo-lite command with its heavy work replaced, for the run-lock tests (tests/test_run_lock.py).

    python tests/lock_driver.py hold|trip|family train|eval|lite|rejudge ARGS...

The model loader, the notebook runner and the judge are replaced before the command starts: `hold` makes them print
HOLDING and sleep (a process that owns its folder and is busy), `trip` makes them print PAST THE LOCK and exit 3 (so
a process that reached them is seen to have got past the lock, and one that did not is seen to have stopped before
any model loaded). `family` starts what a notebook job starts (a kernel-like process in its own session, registered
as the job's, with two workers of its own), prints their pids after FAMILY and sleeps.
"""

import sys
import time


FAMILY = """
import subprocess, sys, time
workers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]) for _ in range(2)]
print(" ".join(str(w.pid) for w in workers), flush=True)
time.sleep(600)
"""


def start_family() -> None:
    import subprocess

    from fspo_lite.drivers.job_control import register_group

    kernel = subprocess.Popen([sys.executable, "-c", FAMILY], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    register_group(kernel.pid)
    print("FAMILY", kernel.pid, kernel.stdout.readline().strip(), flush=True)
    time.sleep(600)


def stand_in(mode: str):
    def replaced(*args, **kwargs):
        if mode == "family":
            start_family()
        if mode == "hold":
            print("HOLDING", flush=True)
            time.sleep(300)
        print("PAST THE LOCK", flush=True)
        sys.exit(3)

    return replaced


def main() -> int:
    mode, command, *rest = sys.argv[1:]
    import fspo_lite.drivers.experiment as experiment
    import fspo_lite.models.policy as policy
    import fspo_lite.scoring.verifiers as verifiers
    import fspo_lite.update.trainer as trainer

    policy.load_policy = trainer.load_policy = stand_in(mode)  # the trainer holds its own name for the loader
    experiment.run_profile = stand_in(mode)
    verifiers.build_verifier = stand_in(mode)
    if command == "rejudge":
        from fspo_lite.evaluation.rejudge import main as rejudge

        return rejudge(rest)
    from fspo_lite.__main__ import main as cli

    return cli([command, *rest])


if __name__ == "__main__":
    sys.exit(main())
