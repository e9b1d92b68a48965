"""Workflow configuration: presets, overrides, schema validation and expansion into cases."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path

import yaml

from equibench.cases import Case, expand
from equibench.devices import resolve_devices
from equibench.schema import CONFIG_FILES, ConfigError, validated

# The presets (workflows/config/*.yaml), wherever the package is installed.
CONFIG_DIR = Path(str(CONFIG_FILES))


def deep_merge(base: Mapping, override: Mapping) -> dict:
    """``override`` wins; mappings merge recursively, everything else is replaced."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _preset_path(preset: str) -> Path:
    named = CONFIG_DIR / f"{preset}.yaml"
    if named.exists():
        return named
    path = Path(preset)
    if path.exists():
        return path
    choices = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml") if p.stem not in ("default",
                                                                                 "schema"))
    raise ConfigError(f"preset {preset!r} is neither one of {choices} nor an existing file")


# Suffix of the model variants that run their graph operations with DGL, whose wheels need
# an environment of their own (workflows/environments.smk).
DGL_SUFFIX = "+dgl"


def environment(block: Mapping) -> str:
    """The environment a suite's jobs run in: ``dgl`` for ``+dgl`` variants, else ``main``."""
    return "dgl" if any(v.endswith(DGL_SUFFIX) for v in block.get("variants", [])) else "main"


def _check_environments(config: Mapping) -> None:
    for block in config["suites"]:
        variants = block.get("variants", [])
        dgl = [v for v in variants if v.endswith(DGL_SUFFIX)]
        if dgl and len(dgl) != len(variants):
            raise ConfigError(
                f"suite {block['name']!r} mixes {DGL_SUFFIX} variants with others; the "
                f"{DGL_SUFFIX} ones run in the DGL environment (torch 2.2): give them a suite "
                "of their own")


def _check_scaling(config: Mapping) -> None:
    for block in config["suites"]:
        if "scaling_limit_s" in block and block["level"] != "md":
            raise ConfigError(
                f"suite {block['name']!r}: scaling_limit_s grows md structures, and the "
                f"suite's level is {block['level']}; remove it or make the suite level md")


def _check_workloads(config: Mapping) -> None:
    """Every user-defined workload is a tensor product (checked before any job runs)."""
    if not config["workloads"]:
        return  # without them, resolving imports neither torch nor e3nn
    from equibench.custom_workloads import SpecError, from_config

    try:
        from_config(config["workloads"])
    except SpecError as err:
        raise ConfigError(f"invalid configuration at {err}") from None


def _read_yaml(path: Path) -> dict:
    """The mapping in the YAML file ``path`` (empty file: ``{}``); ConfigError naming the
    file when it is not valid YAML."""
    try:
        return yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path} is not valid YAML: {err}") from None


def resolve(config: Mapping) -> dict:
    """Merge the preset named by ``config['preset']`` under ``config`` and validate."""
    preset = config.get("preset", "quick")
    merged = deep_merge(_read_yaml(_preset_path(preset)), config)
    merged["preset"] = preset
    merged = validated(merged)
    _check_environments(merged)
    _check_scaling(merged)
    _check_workloads(merged)
    return merged


def load(path: str | Path) -> dict:
    """Load a resolved-or-not configuration file and resolve it. A preset's own file
    (``workflows/config/full.yaml``) resolves as that preset, as ``--config preset=full``
    does, not merged over the default preset."""
    path = Path(path)
    config = _read_yaml(path)
    if "preset" not in config and path.resolve().parent == CONFIG_DIR.resolve():
        config["preset"] = path.stem
    return resolve(config)


def config_hash(config: Mapping) -> str:
    blob = json.dumps(config, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


# The implementation name of a per-suite job (``jobs: per-suite``): every implementation
# of the suite, in its order.
ALL_IMPLEMENTATIONS = "all"


def jobs(config: Mapping) -> Iterator[tuple[str, str, str]]:
    """(suite, implementation, device) of every Snakemake benchmark job.

    One job runs every implementation's sweep over a suite (implementation ``all``, the
    default ``jobs: per-suite``: the runner interleaves their rounds), or with ``jobs:
    per-implementation`` one implementation's; every case still runs in a process of its
    own. A job per case would pay the interpreter start-up hundreds of times.
    """
    per_suite = config["jobs"] == "per-suite"
    for device in resolve_devices(config["device"]):
        for suite in config["suites"]:
            if not batches(suite, device):
                continue  # cpu_batches: [] (a suite for GPUs only)
            implementations = ([ALL_IMPLEMENTATIONS] if per_suite
                               else suite["implementations"])
            for implementation in implementations:
                yield suite["name"], implementation, device


def batches(block: Mapping, device: str) -> list[int]:
    """A suite's batches on ``device``: its ``cpu_batches`` on a CPU where it has them (an
    empty list: the suite does not run on a CPU), else its ``batches``."""
    return block.get("cpu_batches", block["batches"]) if device == "cpu" else block["batches"]


def suite(config: Mapping, name: str) -> Mapping:
    for block in config["suites"]:
        if block["name"] == name:
            return block
    raise ConfigError(f"no suite named {name!r} in the configuration")


def suite_cases(config: Mapping, suite_name: str, implementation: str, device: str
                ) -> list[Case]:
    """The cases of one job, in a stable order (``implementation`` may be ``all``), at the
    suite's :func:`batches` for ``device``."""
    block = suite(config, suite_name)
    implementations = (block["implementations"] if implementation == ALL_IMPLEMENTATIONS
                       else [implementation])
    return list(expand(
        level=block["level"], workloads=block["workloads"], implementations=implementations,
        directions=block["directions"], precisions=block["precisions"],
        batches=batches(block, device), device=device,
        variants=block.get("variants", ["default"]), modes=block.get("modes", ["eager"]),
    ))
