# One job per (suite, device) that sweeps every implementation of the suite (per-suite), or
# per (suite, implementation, device) (per-implementation: see the schema).
# Inside it every case runs in a process of its own, so a crash or an out-of-memory case
# costs that case alone.
import json

from equibench.devices import from_path_name


rule resolved_config:
    output:
        f"{RUN}/config.yaml",
    log:
        f"{RUN}/logs/config.log",
    params:
        text=json.dumps(CFG, indent=2, sort_keys=True),
    conda:
        "envs/equibench.yaml"
    shell:
        "echo {params.text:q} > {output} 2> {log}"


rule probe_machine:
    input:
        config=f"{RUN}/config.yaml",
    output:
        f"{RUN}/machine.json",
    log:
        f"{RUN}/logs/probe_machine.log",
    threads: workflow.cores
    params:
        device=CFG["device"] if isinstance(CFG["device"], str) else ",".join(CFG["device"]),
        threads=CFG["threads"],
    conda:
        "envs/equibench.yaml"
    shell:
        "equibench probe --device {params.device} --threads {params.threads} "
        "--out {output} > {log} 2>&1"


rule bench:
    input:
        config=f"{RUN}/config.yaml",
        datasets=job_datasets,
        environment=job_environment,
    output:
        f"{RUN}/cases/{{suite}}/{{impl}}/{{device}}.parquet",
    log:
        f"{RUN}/logs/{{suite}}/{{impl}}/{{device}}.log",
    # CPU jobs take every core so that no two timed jobs share the CPU; GPU jobs take one
    # core and hold a lock on their device.
    threads: lambda wc: 1 if wc.device.startswith("cuda") else workflow.cores
    resources:
        gpu=lambda wc: 1 if wc.device.startswith("cuda") else 0,
    params:
        device=lambda wc: from_path_name(wc.device),
        environment=environment_flag,
    conda:
        "envs/equibench.yaml"
    shell:
        "equibench sweep --config {input.config} --suite {wildcards.suite} "
        "--implementation {wildcards.impl} "
        "--device {params.device} {params.environment} --out {output} --quiet > {log} 2>&1"
