"""Run settings shared by the test modules that run cases in this process."""

from equibench.measure import MeasureConfig
from equibench.runner import RunSettings

# One timed repeat: tests that use it check rows, not speed.
ONE_REPEAT = RunSettings(measure=MeasureConfig(budget_s=0.0, min_repeats=1, max_repeats=1,
                                               warmup=0))
