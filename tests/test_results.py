"""The typed-result base: a result saves with its experiment and format, loads back into its dataclass, and a
file that cannot be read says why (a missing field, an unknown experiment, a newer format) instead of a traceback."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from playground.errors import PlaygroundError
from playground.results import FORMAT, KINDS, Result, load_result, result_kind


@dataclass
class _Row:
    k: int | str
    ratio: float | None = None


@result_kind
@dataclass
class _Toy(Result):
    experiment = "toy-for-tests"
    rows: list[_Row]
    note: str = ""
    extra: dict[str, float] = field(default_factory=dict)


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
    @dataclass
    class Again(Result):
        experiment = "toy-for-tests"

    with pytest.raises(TypeError, match="declared twice"):
        result_kind(Again)
    assert KINDS["toy-for-tests"] is _Toy
