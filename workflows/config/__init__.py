"""The workflow's configuration files (presets and ``schema.yaml``), installed with the
package as ``equibench.workflow_config`` so that a non-editable install finds them through
``importlib.resources``."""
