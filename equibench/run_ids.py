"""Run ids: one per invocation, so that reports can tell two runs of one configuration apart.

A run id is ``<configuration name>-<UTC time>-<6 hex digits>``. Claims and targets count
runs by it (two runs of ``quick`` on one host are two runs, not one), while output folders
stay named after the configuration (``results/<name>/``) and the name has its own column,
``config_name``. The workflow makes one id per ``snakemake`` invocation and hands it to every
job in :data:`ENV` (its jobs of one run must share it: claims pair rows of different suites
within one run); ``equibench run`` and a ``sweep`` outside the workflow make their own.

No pandas or torch here: the Snakefile imports this while it parses.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import secrets

ENV = "EQUIBENCH_RUN_ID"
# What new_run_id appends to the name (config_name_of strips it).
_SUFFIX = re.compile(r"-\d{8}T\d{6}Z-[0-9a-f]{6}$")


def new_run_id(config_name: str) -> str:
    """A fresh id for a run of the configuration ``config_name``."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{config_name}-{stamp}-{secrets.token_hex(3)}"


def current(config_name: str) -> str:
    """The run id of this invocation: the workflow's (:data:`ENV`) where one is set, else a
    new one."""
    return os.environ.get(ENV) or new_run_id(config_name)


def config_name_of(run_id: str) -> str:
    """The configuration name in a :func:`new_run_id` id; an older id (which was the
    configuration's name itself) is returned whole."""
    return _SUFFIX.sub("", run_id)
