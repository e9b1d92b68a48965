# Dataset preparation rules for equibench.
#
# Outputs live in the dataset cache, not in the work tree:
#   $EQUIBENCH_DATA_DIR/prepared/<name>.npz   (default ~/.cache/equibench/data)
# Names: qm9, oc20, oc20-like (synthetic). See `equibench datasets prepare --help`.
#
# Config (all optional):
#   datasets:                  # what to prepare for the `datasets` target
#     - qm9                    # a name (default source) ...
#     - {name: qm9, source: figshare}   # ... or a name with a source
#   ... any `dataset: <name>` value anywhere else in the config (benchmark entries)
#   is also prepared, so configured benchmarks get what they need.
#
# Other rules depend on a prepared dataset with `prepared_dataset("qm9")` as input.

import os
import re
from pathlib import Path

EQUIBENCH_DATASETS = ("qm9", "oc20", "oc20-like")


def dataset_cache_dir():
    # Same rule as equibench.datasets.cache.data_dir(), repeated here so that parsing
    # the workflow does not import equibench (and torch) on every Snakemake start.
    return Path(os.environ.get("EQUIBENCH_DATA_DIR") or "~/.cache/equibench/data").expanduser()


def prepared_dataset(name):
    """Path of the prepared cache file of dataset `name` (input for other rules)."""
    return str(dataset_cache_dir() / "prepared" / f"{name}.npz")


def _dataset_entries(cfg):
    """(name, source or None) for every dataset the config asks for."""
    entries = {}
    for item in cfg.get("datasets", None) or []:
        if isinstance(item, str):
            entries.setdefault(item, None)
        else:
            entries[item["name"]] = item.get("source")

    def scan(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "dataset" and isinstance(value, str):
                    entries.setdefault(value, None)
                else:
                    scan(value)
        elif isinstance(node, list):
            for value in node:
                scan(value)

    scan({k: v for k, v in cfg.items() if k != "datasets"})
    unknown = sorted(set(entries) - set(EQUIBENCH_DATASETS))
    if unknown:
        raise ValueError(f"unknown datasets in config: {unknown}; known: {EQUIBENCH_DATASETS}")
    return entries


def configured_datasets(cfg):
    """Names of the datasets the config needs, in a stable order."""
    return sorted(_dataset_entries(cfg))


def _source_flag(wildcards):
    source = _dataset_entries(config).get(wildcards.name)
    return f"--source {source}" if source else ""


# Downloads need the internet, which cluster compute nodes often lack: run it locally.
localrules:
    prepare_dataset,


rule prepare_dataset:
    """Download/read/generate one dataset into its prepared cache file."""
    output:
        prepared_dataset("{name}"),
    wildcard_constraints:
        name="|".join(re.escape(n) for n in EQUIBENCH_DATASETS),
    params:
        source=_source_flag,
    resources:
        mem_mb=4096,
    shell:
        "equibench datasets prepare {wildcards.name} {params.source} --force --quiet"


rule datasets:
    """Prepare every dataset the configured benchmarks need."""
    input:
        [prepared_dataset(name) for name in configured_datasets(config)],
