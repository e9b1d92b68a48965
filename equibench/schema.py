"""The workflow configuration's schema (``workflows/config/schema.yaml``): validation, and
the one place where every setting's default lives (its ``default`` keywords).

Presets, ``equibench run`` (no configuration file) and the dataclasses that carry settings
(``measure.MeasureConfig``, ``runner.RunSettings``) all take their defaults from here.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from importlib import resources

import jsonschema
import yaml

# workflows/config/ in the source tree, installed as the package ``equibench.workflow_config``
# (pyproject.toml): found the same way by an editable and a regular install.
CONFIG_FILES = resources.files("equibench.workflow_config")
SCHEMA_PATH = CONFIG_FILES / "schema.yaml"


class ConfigError(ValueError):
    """A configuration that does not follow workflows/config/schema.yaml."""


@functools.cache
def _schema() -> dict:
    return yaml.safe_load(SCHEMA_PATH.read_text())


@functools.cache
def _filling_validator_class():  # noqa: ANN202 - a jsonschema validator class
    """Draft 2020-12 that also fills in every missing property with a ``default``, parents
    before children (jsonschema's documented extension; Snakemake's ``set_default``)."""
    base = jsonschema.Draft202012Validator
    validate_properties = base.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):  # noqa: ANN001, ANN202
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema:
                    instance.setdefault(name, copy.deepcopy(subschema["default"]))
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(base, {"properties": set_defaults})


def validated(config: Mapping) -> dict:
    """A copy of ``config`` with every default filled in; :class:`ConfigError` naming the
    first problem (its path and jsonschema's message) if it does not follow the schema."""
    filled = copy.deepcopy(dict(config))
    validator = _filling_validator_class()(_schema())
    error = jsonschema.exceptions.best_match(validator.iter_errors(filled))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "<top level>"
        raise ConfigError(f"invalid configuration at {where}: {error.message}")
    return filled


def defaults() -> dict:
    """Every top-level setting's default, nested mappings filled in (e.g. ``measure``)."""
    return copy.deepcopy(_defaults())


@functools.cache
def _defaults() -> dict:
    out: dict = {}
    filler = _filling_validator_class()({**_schema(), "required": []})
    for _ in filler.iter_errors(out):  # filling is a side effect of validating
        pass
    return out
