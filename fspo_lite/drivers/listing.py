"""`fspo-lite list methods|verifiers|benchmarks|profiles`: what each registry holds, one line per entry, read from
the registries themselves (the reward-method table, the verifier table, the benchmark table, configs/lite/)."""

from __future__ import annotations

KINDS = ("methods", "verifiers", "benchmarks", "profiles")


def entries(kind: str) -> dict[str, str]:
    """Name -> one line, for one of KINDS."""
    if kind == "methods":
        from fspo_lite.scoring.methods import method_summaries

        return {**method_summaries(), **arm_settings()}
    if kind == "verifiers":
        from fspo_lite.scoring.verifiers import VERIFIERS

        return {name: (cls.__doc__ or "").strip().splitlines()[0] for name, cls in VERIFIERS.items()}
    if kind == "benchmarks":
        from fspo_lite.evaluation.benchmarks import BENCHMARKS

        return {name: benchmark.description for name, benchmark in BENCHMARKS.items()}
    if kind == "profiles":
        from fspo_lite.drivers.experiment import profile_names

        return profile_names()
    raise ValueError(f"unknown list {kind!r}; available: {', '.join(KINDS)}")


def arm_settings() -> dict[str, str]:
    """The study's named arms that are settings rather than reward methods (corver, fspo+kb, grpo+4x, ...), each with
    the keys that make it: read from the profiles' `arms` (configs/lite/*.yaml), so `list methods` names them too."""
    from fspo_lite.config import parse_yaml_file
    from fspo_lite.drivers.experiment import PROFILE_DIR

    settings = {}
    for path in sorted(PROFILE_DIR.glob("*.yaml")):
        try:
            notebooks = (parse_yaml_file(path) or {}).get("notebooks") or {}
        except Exception:  # an unreadable profile is `list profiles`'s to report
            continue
        for notebook in notebooks if isinstance(notebooks, list) else ():
            arms = ((notebook or {}).get("parameters") or {}).get("arms") if isinstance(notebook, dict) else None
            for name, keys in (arms or {}).items() if isinstance(arms, dict) else ():
                if isinstance(keys, dict):
                    sets = " ".join(f"--set {key}={value}" for key, value in keys.items())
                    settings.setdefault(name, f"a {path.stem} arm, not a method: {sets}")
    return settings


def cmd_list(args) -> int:
    """Print the entries of args.kind, name then description, aligned."""
    items = entries(args.kind)
    width = max(map(len, items), default=0)
    for name, about in items.items():
        print(f"{name:<{width}}  {about}")
    return 0
