"""A study's runs are one group in the experiment trackers, named after the study (--tracker-group)."""

from megamlm.config import parse_args


def test_every_run_of_a_study_reports_to_the_study_s_group(small_plan):
    plan = small_plan()
    groups = {run.name: parse_args(plan.flags(run)).logging.tracker_group for run in plan.runs}
    assert set(groups.values()) == {plan.study.name}, groups
