"""Scaling runs of the md level: supercells run smallest first, a backend stops growing after
a size that fails or is over the time limit (its larger sizes recorded with the reason),
the runner and the configuration take it, and the MD page draws it."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from equibench.dashboards.sample import synthetic_results
from equibench.dashboards.site import write_site

from equibench import config, results, scaling
from equibench.cases import Case
from equibench.measure import MeasureConfig
from equibench.runner import RunSettings, run_cases

QUICK = MeasureConfig(min_repeats=1, max_repeats=1, budget_s=0, warmup=0, rounds=1)


def md_case(workload: str, backend: str = "e3nn", precision: str = "float32") -> Case:
    return Case("md", workload, backend, "small", "nve", precision, 2, "cpu")


def test_smallest_first_and_a_backend_stops_after_a_failure_or_the_limit() -> None:
    cases = [md_case(w, b) for w in ("diamond@3x3x3", "water-box", "diamond@2x2x2",
                                     "diamond@2x2x3", "diamond")
             for b in ("e3nn", "fused")]
    order = [c.workload for c in scaling.ordered(cases)]
    assert order == ["diamond"] * 2 + ["diamond@2x2x2"] * 2 + ["diamond@2x2x3"] * 2 \
        + ["diamond@3x3x3"] * 2 + ["water-box"] * 2
    growth = scaling.Growth(limit_s=1.0)
    ok = {"status": "ok", "threads": 2, "cpu_allocator": "tcmalloc"}
    growth.record(md_case("diamond"), {**ok, "time_median_s": 1.0})  # 0.5 s per step
    growth.record(md_case("diamond", "fused"), {**ok, "time_median_s": 0.2})
    assert growth.skipped(md_case("diamond@2x2x2")) is None
    growth.record(md_case("diamond@2x2x2"), {**ok, "time_median_s": 2.4})  # 1.2 s per step
    growth.record(md_case("diamond@2x2x2", "fused"), {"status": "oom", "threads": 2})
    slow = growth.skipped(md_case("diamond@3x3x3"))
    assert slow == {**md_case("diamond@3x3x3").to_dict(), "status": "unavailable",
                    "threads": 2, "cpu_allocator": "tcmalloc",
                    "reason": "not run (scaling): diamond@2x2x2 took 1.2 s per step on this "
                              "backend, over the limit of 1 s"}
    assert growth.skipped(md_case("diamond@3x3x3", "fused"))["reason"] \
        == "not run (scaling): diamond@2x2x2 ended oom on this backend"
    # Other structures, precisions and backends grow on their own.
    assert growth.skipped(md_case("water-box")) is None
    assert growth.skipped(md_case("diamond@3x3x3", precision="float64")) is None
    assert growth.skipped(md_case("diamond@3x3x3", "cuequivariance")) is None


@pytest.mark.slow
def test_a_scaling_run_through_the_runner(tmp_path) -> None:
    pytest.importorskip("mace.modules", exc_type=ImportError)
    cases = [md_case(w) for w in ("diamond@2x1x1", "diamond@2x2x1", "diamond")]
    settings = RunSettings(measure=QUICK, scaling_limit_s=1e-6)
    frame = run_cases(cases, settings, tmp_path / "rows.parquet", progress=False)
    assert list(frame["workload"]) == ["diamond", "diamond@2x1x1", "diamond@2x2x1"]
    first, *rest = (row for _, row in frame.iterrows())
    assert first["status"] == "ok", first["reason"]
    assert json.loads(first["extra"])["atoms"] == 8
    for row in rest:
        assert row["status"] == "unavailable" and row["threads"] == first["threads"]
        assert re.fullmatch(r"not run \(scaling\): diamond took \S+ s per step on this "
                            r"backend, over the limit of 1e-06 s", row["reason"])
    with pytest.raises(ValueError, match="grows md structures"):
        run_cases([Case("tp", "mace-large", "e3nn", "default", "forward", "float32", 8,
                        "cpu")], settings, progress=False)


def test_scaling_limit_is_for_md_suites_only() -> None:
    md_suite = {"name": "grow", "level": "md", "workloads": ["diamond", "diamond@2x2x2"],
                "implementations": ["e3nn"], "variants": ["small"], "directions": ["nve"],
                "precisions": ["float32"], "batches": [2], "scaling_limit_s": 2.5}
    assert config.resolve({"preset": "quick", "suites": [md_suite]})["suites"][0][
        "scaling_limit_s"] == 2.5
    with pytest.raises(config.ConfigError, match="scaling_limit_s grows md structures"):
        config.resolve({"preset": "quick", "suites": [{
            **md_suite, "level": "model", "workloads": ["mace-qm9"], "directions": ["inference"]}]})
    assert config.suite(config.resolve({"preset": "full"}), "md-scaling")["scaling_limit_s"] > 0


def _scaling_rows() -> pd.DataFrame:
    """Synthetic md rows (labelled so, as the sample's): diamond at 8, 64 and 216 atoms for
    two backends; e3nn stops at 216 atoms (over the limit), fused runs all three."""
    rows = []
    for backend, per_atom in (("e3nn", 1e-3), ("fused", 2e-4)):
        for cells, workload in ((1, "diamond"), (8, "diamond@2x2x2"), (27, "diamond@3x3x3")):
            key = dict(level="md", workload=workload, implementation=backend, variant="small",
                       direction="nve", precision="float32", batch=2, device="cpu",
                       host="cpu-host", cpu_model="AMD EPYC 7763", git_commit="c0ffee0000",
                       run_id="sample", threads=2)
            if backend == "e3nn" and cells == 27:
                rows.append({**key, "status": "unavailable",
                             "reason": "not run (scaling): diamond@2x2x2 took 0.13 s per step "
                                       "on this backend, over the limit of 0.1 s"})
                continue
            seconds = 2 * per_atom * 8 * cells
            rows.append({**key, "status": "ok", "time_median_s": seconds,
                         "time_samples": [seconds], "repeats": 1, "throughput": 2 / seconds,
                         "throughput_unit": "steps/s", "peak_mem_bytes": 2**20 * cells,
                         "peak_mem_method": "rss_growth",
                         "peak_tensor_bytes": 2**20 * cells, "peak_tensor_method": "torch_profiler",
                         "extra": json.dumps({"synthetic": True, "atoms": 8 * cells,
                                              "ns_per_day": 1.0})})
    return results.to_frame(rows)


@pytest.mark.slow
def test_md_page_draws_each_structures_scaling_and_the_largest_sizes(tmp_path) -> None:
    out = tmp_path / "dashboard"
    write_site(pd.concat([synthetic_results(), _scaling_rows()], ignore_index=True), out)
    text = (out / "md.html").read_text()
    assert "md scaling: diamond" in text
    data = pd.read_csv(out / "md-scaling-0.csv")
    assert sorted(set(data["atoms"])) == [8, 64, 216]
    start = text.index("<h2>Scaling</h2>")
    table = text[text.index("<tbody>", start):text.index("</tbody>", start)]
    body = [re.findall(r"<td>(.*?)</td>", r) for r in re.findall(r"<tr[^>]*>(.*?)</tr>", table)]
    largest = {r[2]: r for r in body}
    assert largest["e3nn [small]"][5:7] == ["diamond@2x2x2", "64"]
    assert largest["e3nn [small]"][9].startswith("diamond@2x2x2 took 0.13 s per step")
    assert largest["fused [small]"][5:7] == ["diamond@3x3x3", "216"]
    assert largest["fused [small]"][9] == ""
    assert largest["fused [small]"][8] == "27"  # peak MiB: live tensor bytes
