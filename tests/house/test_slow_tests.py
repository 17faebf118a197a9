"""scripts/slow_tests.py: which tests `bash scripts/test.sh --fast` leaves out, read from a timed run's junit XML."""

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("slow_tests", REPO / "scripts" / "slow_tests.py")
slow_tests = importlib.util.module_from_spec(spec)
spec.loader.exec_module(slow_tests)

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_a" name="test_quick" time="0.2"/>
<testcase classname="tests.test_a" name="test_long[x]" time="4.0"/>
<testcase classname="tests.test_b" name="test_only_long" time="9.0"/>
<testcase classname="tests.test_b" name="test_longer" time="12.0"/>
<testcase classname="tests.test_c.TestGroup" name="test_in_a_class" time="3.0"/>
<testcase classname="tests.test_c" name="test_fast" time="0.1"/>
<testcase classname="" name="tests.test_vllm" time="0.0"/>
</testsuite></testsuites>"""


def test_node_ids_are_pytests_own():
    assert slow_tests.node_id("tests.test_a", "test_long[x]") == "tests/test_a.py::test_long[x]"
    assert slow_tests.node_id("tests.rl.test_x", "test_y") == "tests/rl/test_x.py::test_y"  # a test in its room
    assert slow_tests.node_id("tests.test_c.TestGroup", "test_y") == "tests/test_c.py::TestGroup::test_y"


def test_tests_over_the_limit_are_slow_but_every_module_keeps_its_fastest(tmp_path):
    junit = tmp_path / "suite.xml"
    junit.write_text(JUNIT)
    slow = slow_tests.slow_tests(junit, over=1.0)
    assert slow == [
        "tests/test_a.py::test_long[x]",
        "tests/test_b.py::test_longer",
        "tests/test_c.py::TestGroup::test_in_a_class",
    ]  # test_b keeps test_only_long (its fastest)


def test_the_shipped_list_names_tests_that_exist():
    """Every line of tests/slow_tests.txt names a test function of a test module (a renamed test shows up here)."""
    for line in (REPO / "tests" / "slow_tests.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        path, *names = line.split("::")
        text = (REPO / path).read_text()
        assert f"def {names[-1].split('[')[0]}(" in text, line


def test_module_seconds_sum_each_modules_tests_longest_first(tmp_path):
    junit = tmp_path / "suite.xml"
    junit.write_text(JUNIT)
    assert list(slow_tests.module_seconds(junit).items()) == [
        ("tests/test_b.py", 21.0),
        ("tests/test_a.py", 4.2),
        ("tests/test_c.py", 3.1),
    ]


def test_the_shipped_module_seconds_name_test_modules_that_exist():
    """Every line of tests/module_seconds.txt (the order the full suite hands modules out in) is seconds and a test
    module (a moved or renamed module shows up here)."""
    for line in (REPO / "tests" / "module_seconds.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        seconds, path = line.split()
        assert float(seconds) >= 0 and (REPO / path).is_file() and Path(path).name.startswith("test_"), line
