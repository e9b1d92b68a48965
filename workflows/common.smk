# Functions and constants shared by the rule files (kept apart from rules, as
# `snakemake --lint` asks).
import re

from equibench import config as eqcfg
from equibench.devices import path_name
from equibench.vocabulary import data_dir

EQUIBENCH_DATASETS = ("qm9", "oc20", "oc20-like")


def prepared_dataset(name):
    """Path of the prepared cache file of dataset `name` (input for other rules)."""
    return str(data_dir() / "prepared" / f"{name}.npz")


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
    source = _dataset_entries(CFG).get(wildcards.name)
    return f"--source {source}" if source else ""


JOBS = list(eqcfg.jobs(CFG))
CASE_FILES = [
    f"{RUN}/cases/{suite}/{impl}/{path_name(device)}.parquet" for suite, impl, device in JOBS
]


DGL_STATUS = "results/envs/dgl.json"


def job_environment(wildcards):
    """The DGL environment's status file for suites of `+dgl` variants, else nothing."""
    needs_dgl = eqcfg.environment(eqcfg.suite(CFG, wildcards.suite)) == "dgl"
    return [DGL_STATUS] if needs_dgl else []


def environment_flag(wildcards):
    return f"--environment {DGL_STATUS}" if job_environment(wildcards) else ""


def job_datasets(wildcards):
    """Prepared datasets a job reads: conv graphs <tp>@qm9..., models <model>-qm9, ..."""
    workloads = eqcfg.suite(CFG, wildcards.suite)["workloads"]
    needed = [
        name for name in EQUIBENCH_DATASETS
        if any(w.endswith(f"-{name}") or f"@{name}" in w for w in workloads)
    ]
    return [prepared_dataset(name) for name in needed]
