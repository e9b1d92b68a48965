# equibench: one command from workloads to a published dashboard.
#   snakemake --profile workflows/profiles/local                  # quick preset
#   snakemake --profile workflows/profiles/local --config preset=full
import os
import sys

from equibench import config as eqcfg
from equibench import run_ids

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

# One run id for every job of this invocation (claims pair rows of different suites within
# one run, and count two invocations as two runs); jobs that parse this file again, on a
# cluster, inherit it through the environment.
os.environ.setdefault(run_ids.ENV, run_ids.new_run_id(CFG["name"]))


envvars:
    run_ids.ENV,


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
