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

# Downloads need the internet, which cluster compute nodes often lack: run it locally.
localrules:
    prepare_dataset,


rule prepare_dataset:
    """Download/read/generate one dataset into its prepared cache file."""
    output:
        prepared_dataset("{name}"),
    wildcard_constraints:
        name="|".join(re.escape(n) for n in EQUIBENCH_DATASETS),
    log:
        "results/logs/prepare_dataset/{name}.log",
    params:
        source=_source_flag,
    resources:
        mem_mb=4096,
    conda:
        "envs/equibench.yaml"
    shell:
        "equibench datasets prepare {wildcards.name} {params.source} --force --quiet > {log} 2>&1"


rule datasets:
    """Prepare every dataset the configured benchmarks need."""
    input:
        [prepared_dataset(name) for name in configured_datasets(CFG)],
