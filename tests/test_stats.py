"""Seed statistics checked by hand: mean and sample sd, t quantiles against the tables, paired
differences.
"""

import math

import pytest

from harness.experiments.stats import (
    differences,
    format_differences,
    paired_difference,
    spread,
    t_975,
    what_figures_are,
)


def test_spread_is_the_mean_and_the_sample_standard_deviation():
    # mean 7/3; squared deviations 16/9 + 1/9 + 25/9 = 42/9, over n - 1 = 2
    s = spread([1.0, 2.0, 4.0])
    assert s.n == 3
    assert s.mean == pytest.approx(7 / 3)
    assert s.std == pytest.approx(math.sqrt(7 / 3))  # 1.528, not the population 1.247
    assert spread([5.0]).std is None


def test_t_quantiles_match_the_tables():
    assert (t_975(1), t_975(2), t_975(4), t_975(30)) == (12.706, 4.303, 2.776, 2.042)
    for df, table in [(40, 2.021), (60, 2.000), (120, 1.980)]:  # beyond the table: the expansion
        assert t_975(df) == pytest.approx(table, abs=5e-4)
    with pytest.raises(ValueError, match="degree of freedom"):
        t_975(0)


def test_paired_difference_by_hand():
    base, ablation = [1.0, 2.0, 3.0], [1.5, 2.7, 3.4]  # d = 0.5, 0.7, 0.4: mean 0.5333, sd 0.1528
    d = paired_difference(ablation, base)
    assert d.n == 3 and d.mean == pytest.approx(0.5333, abs=1e-4)
    # 0.3795: the interval excludes 0
    assert d.half_width == pytest.approx(4.303 * 0.15275 / math.sqrt(3), abs=1e-4)
    # base's seed sd is 1.0: the pairing sees what base's spread hides
    assert d.sigmas == pytest.approx(0.5333, abs=1e-4)
    one = paired_difference([2.0], [1.5])
    assert (one.mean, one.half_width, one.sigmas) == (0.5, None, None)
    assert paired_difference([1.0, 2.0], [0.0, 0.0]).sigmas == math.inf
    assert paired_difference([0.0, 0.0], [0.0, 0.0]).sigmas == 0.0


def test_an_infinite_size_is_shown_only_for_a_difference_whose_interval_excludes_0():
    """compare.py --seeds 2 printed "leak gap +0.000 [-0.004, +0.004] inf sd": base's leak gap is 0
    at every seed, so any difference is infinitely many of its sds, even one the interval cannot
    tell from 0."""
    base = [{"loss/leak_gap": 0.0}, {"loss/leak_gap": 0.0}]  # a causal run: no leak at either seed
    # d = 0.003, -0.001: mean 0.001, sd 0.00283, half width 12.706 x 0.00283 / sqrt(2) = 0.0254: the
    # interval spans 0
    spans = differences(
        {"char": base, "char-no-scale": [{"loss/leak_gap": 0.003}, {"loss/leak_gap": -0.001}]}
    )
    # the number itself is as before
    assert spans["char-no-scale"]["loss/leak_gap"].sigmas == math.inf
    assert "leak gap +0.001 [-0.024, +0.026] n/a sd (constant over seeds)" in format_differences(
        spans, "char", 2
    )
    # d = 0.5, 0.6, 0.6, 0.7 (a no-mask run's leak): mean 0.6, sd 0.0816, half width 3.182 x 0.0816
    # / sqrt(4) = 0.130
    sure = differences(
        {"char": base * 2, "char-no-mask": [{"loss/leak_gap": v} for v in (0.5, 0.6, 0.6, 0.7)]}
    )
    # excludes 0: the size is a finding
    assert "leak gap +0.600 [+0.470, +0.730] inf sd" in format_differences(sure, "char", 4)


def test_one_seed_is_said_as_one_seed_with_no_interval():
    assert (
        what_figures_are(1) == "one seed: no interval"
        and what_figures_are(1, per_point=True) == "one seed per point, no interval"
    )
    assert what_figures_are(3) == "mean ± 95% half width over 3 seeds"
    assert what_figures_are(2, per_point=True) == "2 seeds per point (mean, 95% interval)"
