"""compendium.mutate's summary of mutmut's results (mutmut itself is not run here: make mutate)."""
from compendium import mutate

RESULTS = """\
    compendium.stats.x__sample__mutmut_1: killed
    compendium.stats.x__sample__mutmut_3: survived
    compendium.stats.x_bootstrap_mean_ci__mutmut_1: killed
    compendium.judge.xǁOutcomeǁdescribe__mutmut_2: killed
    compendium.judge.x_derive__mutmut_5: timeout
    compendium.judge.x_derive__mutmut_6: no tests
    compendium.judge.x_derive__mutmut_7: survived
"""


def test_summary_counts_per_module_and_in_all():
    per, text = mutate.summary(RESULTS)
    assert per["compendium.stats"] == {"killed": 2, "survived": 1}
    assert per["compendium.judge"] == {"killed": 1, "timeout": 1, "no tests": 1, "survived": 1}
    lines = text.splitlines()
    assert lines[0] == "compendium.judge: 1 of 3 mutants survived (33.3%); no tests 1, timeout 1"
    assert lines[1] == "compendium.stats: 1 of 3 mutants survived (33.3%)"
    assert lines[2] == "all: 2 of 6 mutants survived (33.3%); no tests 1, timeout 1"
