import os

# Aggregate the per-job tables into the run's table, then publish the dashboard.


rule aggregate:
    input:
        CASE_FILES,
    output:
        f"{RUN}/results.parquet",
    log:
        f"{RUN}/logs/aggregate.log",
    conda:
        "envs/equibench.yaml"
    shell:
        "equibench merge --out {output} {input} > {log} 2>&1"


rule dashboard:
    input:
        f"{RUN}/results.parquet",
    output:
        f"{RUN}/dashboard/index.html",
    log:
        f"{RUN}/logs/dashboard.log",
    params:
        outdir=lambda wc, output: os.path.dirname(output[0]),
    conda:
        "envs/equibench.yaml"
    shell:
        "equibench dashboard {input} --out {params.outdir} > {log} 2>&1"
