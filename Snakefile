# equibench: one command from workloads to a published dashboard.
#   snakemake --profile workflows/profiles/local                  # quick preset
#   snakemake --profile workflows/profiles/local --config preset=full
import os
import sys

from equibench import config as eqcfg

# Rules call the `equibench` command: take it from the environment Snakemake runs in, even
# when that environment is not activated (e.g. `.venv/bin/snakemake`).
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")

configfile: os.path.join(workflow.basedir, "workflows", "config", "default.yaml")


envvars:
    "PATH",

# Validated against workflows/config/schema.yaml before any job runs; an unknown key or a
# bad value stops here with a message naming it.
try:
    CFG = eqcfg.resolve(config)
except eqcfg.ConfigError as err:
    raise WorkflowError(str(err)) from None

RUN = f"results/{CFG['name']}"


include: "workflows/common.smk"
include: "workflows/datasets.smk"
include: "workflows/environments.smk"
include: "workflows/benchmark.smk"
include: "workflows/report.smk"


rule all:
    default_target: True
    input:
        f"{RUN}/results.parquet",
        f"{RUN}/dashboard/index.html",
