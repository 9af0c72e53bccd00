"""Copy the finished runs of a study from one runs folder into another, without their checkpoints, so that they can
be committed and a later `make study` on another machine skips them.

    python scripts/keep_finished_runs.py --from OTHER_CLONE/runs/study --to results/study/runs

A run is finished when its heldout.json carries the settings key its run_settings.json names (what notebook 03
checks before it skips a run: `fspo_lite.drivers.runs.finished_record`). Its files are copied except `checkpoints/`
(the adapter and optimizer state, tens of MB, needed only to resume a run cut off during training); a run still
training, or one made with other settings, is left out. The absolute path of the source folder, which the
trainer's config.yaml and the evaluation summary record, is replaced by the destination's path relative to the
current directory, so that the copied files name no machine's folders; `--machine` names the CPU in a record that
does not (fspo_lite.drivers.runs.machine writes it since 2026-11-26). A run already in the destination with the
same settings key is replaced; `--dry-run` lists what would be copied.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

TEXT_SUFFIXES = {".json", ".jsonl", ".yaml", ".csv", ".md", ".txt"}


def finished(run: Path) -> bool:
    """Whether the run folder holds a held-out record made with the settings its run_settings.json names (the
    check notebook 03 makes before it skips a run)."""
    from fspo_lite.drivers.runs import RUN_SETTINGS, finished_record

    try:
        key = json.loads((run / RUN_SETTINGS).read_text())["settings_key"]
    except (FileNotFoundError, KeyError, json.JSONDecodeError):
        return False
    return finished_record(run, key) is not None


def finished_base(run: Path) -> bool:
    """The base model's folder (no training, so no run_settings.json): finished when heldout.json has a key."""
    try:
        return bool(json.loads((run / "heldout.json").read_text()).get("settings_key"))
    except (FileNotFoundError, json.JSONDecodeError):
        return False


def copy_run(run: Path, destination: Path, source_root: str, replacement: str, machine: str | None = None) -> int:
    """Copy `run` into destination/<run name> without checkpoints/, paths rewritten, and `machine` written into a
    heldout.json that has none; returns the files copied."""
    target = destination / run.name
    if target.exists():
        shutil.rmtree(target)
    copied = 0
    for path in sorted(run.rglob("*")):
        relative = path.relative_to(run)
        if not path.is_file() or relative.parts[0] == "checkpoints":
            continue
        out = target / relative
        out.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix in TEXT_SUFFIXES:
            out.write_text(path.read_text(encoding="utf-8").replace(source_root, replacement), encoding="utf-8")
        else:
            shutil.copy2(path, out)
        copied += 1
    record = json.loads((target / "heldout.json").read_text())
    if machine and not record.get("machine"):
        (target / "heldout.json").write_text(json.dumps({**record, "machine": machine}, indent=1))
    return copied


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="source", required=True, help="runs folder of the study that ran")
    parser.add_argument("--to", dest="destination", required=True, help="runs folder to keep them in")
    parser.add_argument("--machine", help="the CPU the runs were made on, written into a held-out record that does "
                        "not name one (records made before heldout.json carried `machine`)")
    parser.add_argument("--dry-run", action="store_true", help="list the finished runs, copy nothing")
    args = parser.parse_args(argv)
    source, destination = Path(args.source), Path(args.destination)
    if not source.is_dir():
        print(f"error: --from {source} is not a folder", file=sys.stderr)
        return 2
    if source.resolve() == destination.resolve():
        print("error: --from and --to are the same folder", file=sys.stderr)
        return 2
    runs = sorted(p for p in source.iterdir() if p.is_dir() and (finished(p) or (p.name == "base" and finished_base(p))))
    left = sorted(p.name for p in source.iterdir() if p.is_dir() and p not in runs and (p / "run_settings.json").exists())
    replacement = os.path.relpath(destination.resolve(), Path.cwd())
    for run in runs:
        if args.dry_run:
            print(f"would keep {run.name}")
            continue
        count = copy_run(run, destination, str(source.resolve()), replacement, args.machine)
        print(f"kept {run.name}: {count} files")
    print(f"{len(runs)} finished runs {'found' if args.dry_run else 'kept in ' + str(destination)}; "
          f"not finished (left out): {', '.join(left) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
