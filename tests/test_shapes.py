"""The output-shape rule (playground.lab.shapes), case by case: fences, JSON by parse, indented code, copied
text by token n-grams, prose; and tokens taking their first character's shape."""

import pytest

from playground.lab.shapes import COPY_MIN_TOKENS, char_spans, copied_mask, runs, segment


def shapes_of(text):
    return [(text[a:b], s) for a, b, s in char_spans(text)]


@pytest.mark.parametrize("text, expected", [
    ('{"name": "f", "arguments": {"x": 1}}', [('{"name": "f", "arguments": {"x": 1}}', "json")]),
    ('Thought: look it up.\nAction Input: {"query": "a b"}', [('{"query": "a b"}', "json")]),
    ("See [1] and {braces} here.", []),  # "[1]" is too short to be JSON, "{braces}" does not parse
    ("Values: [1, 2, 3] and []", [("[1, 2, 3]", "json")]),  # a non-empty array of 8+ characters
    ('Cut off: {"name": "f", "arguments": {"x"', [('{"name": "f", "arguments": {"x"', "json")]),  # open at the end
    ("Code:\n```python\ndef f():\n    return {1: 2}\n```\nDone.",
     [("```python\ndef f():\n    return {1: 2}\n```\n", "code")]),  # the fence wins over the dict inside it
    ('```json\n{"a": 1}\n```', [('```json\n{"a": 1}\n```', "json")]),
    ("```\nunclosed fence to the end", [("```\nunclosed fence to the end", "code")]),
    ("Run:\n    pip install x\n    make test\nthen", [("    pip install x\n    make test\n", "code")]),
    ("One indented line:\n    only one\nis prose", []),  # an indented run needs 2 lines
    ("plain prose, nothing else", []),
])
def test_char_spans_follow_the_rule(text, expected):
    assert shapes_of(text) == expected


def test_copied_is_a_run_of_n_tokens_found_in_the_prompt():
    prompt = list(range(100, 120))
    completion = [1, 2, *range(105, 105 + COPY_MIN_TOKENS), 3, *range(100, 100 + COPY_MIN_TOKENS - 1)]
    mask = copied_mask(prompt, completion)
    assert mask == [False, False] + [True] * COPY_MIN_TOKENS + [False] * COPY_MIN_TOKENS  # 7 in a row is not enough
    assert segment(None, prompt, completion) == ["copied" if m else "prose" for m in mask]


@pytest.fixture(scope="module")
def tokenizer():
    from playground.pairs.loading import ensure_embedded_safetensors, load_tokenizer

    return load_tokenizer(ensure_embedded_safetensors(progress=lambda *a: None))


def test_a_react_step_is_prose_then_json_and_the_end_token_takes_the_shape_before_it(tokenizer):
    text = 'Thought: I should search.\nAction: search\nAction Input: {"query": "population of Canada"}<|im_end|>'
    ids = tokenizer.encode(text, add_special_tokens=False)
    shapes = segment(tokenizer, [], ids)
    spans = runs(shapes)
    assert [s for _, _, s in spans] == ["prose", "json"] and spans[-1][1] == len(ids)
    first_json = spans[1][0]
    assert tokenizer.decode(ids[first_json:]).lstrip().startswith('{"query"')


def test_json_beats_copied_and_copied_beats_prose(tokenizer):
    prompt_text = 'The status is "Delayed at the regional sorting centre in Lyon" for order A-1.'
    prompt = tokenizer.encode(prompt_text, add_special_tokens=False)
    out = tokenizer.encode('It is "Delayed at the regional sorting centre in Lyon". {"order": "A-1", "n": 2}',
                           add_special_tokens=False)
    shapes = segment(tokenizer, prompt, out)
    assert [s for _, _, s in runs(shapes)] == ["prose", "copied", "prose", "json"]
