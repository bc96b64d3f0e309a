"""The typed-result base: a result saves with its experiment and format, loads back into its dataclass, and a
file that cannot be read says why (a missing field, an unknown experiment, a newer format) instead of a traceback."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from playground.errors import PlaygroundError
from playground.experiments import (
    Experiment,
    register_experiment,
    result_type,
    unregister_experiment,
)
from playground.results import FORMAT, Result, load_result


@dataclass
class _Row:
    k: int | str
    ratio: float | None = None


@dataclass
class _Toy(Result):
    experiment = "toy-for-tests"
    rows: list[_Row]
    note: str = ""
    extra: dict[str, float] = field(default_factory=dict)


@pytest.fixture(autouse=True, scope="module")
def _toy_declared():
    """A result type is its experiment's declaration's `result`: the toy's, for this module's tests only."""
    register_experiment(Experiment("toy-for-tests", result=_Toy, report=repr, script="none.py"))
    yield
    unregister_experiment("toy-for-tests")


def test_a_result_round_trips_through_its_file(tmp_path):
    toy = _Toy(rows=[_Row(3, 1.25), _Row("adaptive")], note="n", extra={"a": 0.5})
    path = tmp_path / "r.json"
    toy.save(path)
    doc = json.loads(path.read_text())
    assert doc["experiment"] == "toy-for-tests" and doc["format"] == FORMAT
    back = load_result(path)
    assert isinstance(back, _Toy) and back == toy
    assert back.rows[1].k == "adaptive" and isinstance(back.rows[0], _Row)


def test_an_old_file_with_the_same_keys_loads(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"experiment": "toy-for-tests", "rows": [{"k": 2, "ratio": 1.1, "gone": 1}]}))
    assert load_result(path) == _Toy(rows=[_Row(2, 1.1)])


def test_a_file_missing_a_field_names_it(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"experiment": "toy-for-tests", "rows": [{"ratio": 1.1}]}))
    with pytest.raises(PlaygroundError, match=r"rows\.0\.k: Field required.*older playground \(format 1"):
        load_result(path)


@pytest.mark.parametrize("doc, words", [
    ({"experiment": "no-such-thing"}, "cannot read"),
    ({"experiment": "toy-for-tests", "format": FORMAT + 1, "rows": []}, "update the playground"),
    ([1, 2], "no 'experiment' field"),
])
def test_unreadable_files_say_why(tmp_path, doc, words):
    path = tmp_path / "x.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(PlaygroundError, match=words):
        load_result(path)


def test_an_experiment_is_declared_once():
    with pytest.raises(PlaygroundError, match="already registered"):
        register_experiment(Experiment("toy-for-tests", result=_Toy, report=repr, script="none.py"))
    assert result_type("toy-for-tests") is _Toy


def test_a_result_type_saves_its_experiments_name():
    @dataclass
    class Other(Result):
        experiment = "other"

    register_experiment(Experiment("toy-misnamed", result=Other, report=repr, script="none.py"))
    try:
        with pytest.raises(PlaygroundError, match="declares Other as its result, which saves 'other' files"):
            result_type("toy-misnamed")
    finally:
        unregister_experiment("toy-misnamed")
