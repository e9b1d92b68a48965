# Environments other than the main one. DGL (the `+dgl` model variants) needs torch <= 2.2.1:
# built once into .venv-dgl; the status file records whether that worked, and jobs of
# suites with `+dgl` variants run there, or record why they cannot (equibench/dgl_env.py).
# Delete results/envs/dgl.json to build again.


rule dgl_env:
    output:
        DGL_STATUS,
    log:
        build="results/envs/dgl.log",
        summary="results/envs/dgl.summary.log",
    conda:
        "envs/equibench.yaml"
    shell:
        "equibench dgl-env --status {output} --log {log.build} > {log.summary} 2>&1"
