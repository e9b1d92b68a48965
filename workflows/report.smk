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
        results=f"{RUN}/results.parquet",
        machine=f"{RUN}/machine.json",
        history=f"{RUN}/history.parquet",
    output:
        f"{RUN}/dashboard/index.html",
    log:
        f"{RUN}/logs/dashboard.log",
    params:
        outdir=lambda wc, output: os.path.dirname(output[0]),
    conda:
        "envs/equibench.yaml"
    shell:
        "equibench dashboard {input.results} --out {params.outdir} > {log} 2>&1"


# The run's tracked speedups, its own declared output; the dashboard's History page reads
# every run's (history.read_all), so no rule writes outside its outputs.
rule history:
    input:
        f"{RUN}/results.parquet",
    output:
        f"{RUN}/history.parquet",
    log:
        f"{RUN}/logs/history.log",
    conda:
        "envs/equibench.yaml"
    shell:
        "equibench history add {input} --history {output} > {log} 2>&1"
