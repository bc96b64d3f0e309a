"""Which grammar library constrains a run: llguidance, xgrammar and outlines-core, side by side on this CPU.

On the embedded tokenizer (SmolLM2, 49,152 tokens) and each JSON preset's schema (separators ", " and ": ", no other
whitespace, as the presets' few-shot answers write JSON), each library that is installed: whether it takes the
tokenizer, the schema's compile time, the mask's time per token along the preset's own few-shot answer, as the loop
needs it (a bool tensor over the vocabulary: the median, mean and max over every position of `--repeats` walks), whether a matcher rolls back (and lands on the same mask), and the tokens it
forces at the start. With --target-step, the embedded target's plain step too (the median of 16 unconstrained steps
on the first preset), so each mask time is also a fraction of a step. A library that is missing or refuses is named
with its reason. The JSON goes to --out; docs/constraints.md says which was chosen and why.

    .venv/bin/python scripts/grammar_libraries.py --repeats 3 --target-step --out docs/results/grammar-libraries-epyc.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

from playground.constraints.grammar import JSON_OPTIONS
from playground.constraints.schema import schema_presets
from playground.envinfo import environment
from playground.inputs.presets import get_preset
from playground.pairs.loading import ensure_embedded_safetensors, load_tokenizer

SEPARATORS = (JSON_OPTIONS["item_separator"], JSON_OPTIONS["key_separator"])


def answer(preset) -> str:
    """The preset's last few-shot answer: one JSON value its schema accepts, written as the prompt writes JSON."""
    return [m["content"] for m in preset.messages if m["role"] == "assistant"][-1]


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t) * 1000


class LLGuidance:
    name = "llguidance"

    def __init__(self, tokenizer):
        import llguidance  # each library is imported only by its own arm: any may be missing
        import llguidance.hf  # (the same)

        self.ll, self.version = llguidance, version("llguidance")
        self.tok, self.n = llguidance.hf.from_tokenizer(tokenizer, n_vocab=len(tokenizer)), len(tokenizer)

    def compile(self, schema):
        g = self.ll.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_OPTIONS)
        return g

    def matcher(self, compiled):
        m = self.ll.LLMatcher(self.tok, compiled, log_level=0)
        if m.is_error():
            raise RuntimeError(m.get_error())
        return m

    def mask(self, m):
        return torch.from_numpy(np.unpackbits(np.frombuffer(m.compute_bitmask(), dtype=np.uint8),
                                              bitorder="little")[: self.n].astype(bool))

    def advance(self, m, token):
        assert m.consume_token(token), m.get_error()

    def rollback(self, m, n):
        return bool(m.rollback(n))

    def forced(self, m):
        return "tokens: " + self.tok.decode_str(list(m.compute_ff_tokens()))


class XGrammar:
    name = "xgrammar"

    def __init__(self, tokenizer):
        import xgrammar  # each library is imported only by its own arm: any may be missing

        self.xg, self.version = xgrammar, version("xgrammar")
        info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer))
        self.compiler = xgrammar.GrammarCompiler(info)
        self.bitmask, self.n = xgrammar.allocate_token_bitmask(1, info.vocab_size), len(tokenizer)

    def compile(self, schema):
        return self.compiler.compile_json_schema(json.dumps(schema), any_whitespace=False, separators=SEPARATORS)

    def matcher(self, compiled):
        return self.xg.GrammarMatcher(compiled, max_rollback_tokens=64)

    def mask(self, m):
        m.fill_next_token_bitmask(self.bitmask)
        return torch.from_numpy(np.unpackbits(self.bitmask.numpy().view(np.uint8), bitorder="little")[: self.n]
                                .astype(bool))

    def advance(self, m, token):
        assert m.accept_token(token)

    def rollback(self, m, n):
        m.rollback(n)
        return True

    def forced(self, m):
        return "string: " + m.find_jump_forward_string()  # a string, not tokens: no boundary rule


class OutlinesCore:
    name = "outlines-core"

    def __init__(self, tokenizer):
        import outlines_core  # each library is imported only by its own arm: any may be missing
        from outlines_core.json_schema import build_regex_from_schema  # (the same)

        self.oc, self.version, self.regex = outlines_core, version("outlines-core"), build_regex_from_schema
        vocab: dict[str, list[int]] = {}
        for token, i in tokenizer.get_vocab().items():
            if i != tokenizer.eos_token_id:  # its Vocabulary takes each token's text, not its byte-level spelling
                vocab.setdefault(tokenizer.convert_tokens_to_string([token]), []).append(i)
        self.vocab, self.n = outlines_core.Vocabulary(tokenizer.eos_token_id, vocab), len(tokenizer)

    def compile(self, schema):
        # one optional space between tokens: outlines-core has no separators option, so ", " and ": " need it
        regex = self.regex(json.dumps(schema), whitespace_pattern=" ?")
        return self.oc.Index(regex, self.vocab)

    def matcher(self, compiled):
        return self.oc.Guide(compiled)

    def mask(self, m):
        mask = torch.zeros(self.n, dtype=torch.bool)
        mask[m.get_tokens()] = True
        return mask

    def advance(self, m, token):
        m.advance(token)

    def rollback(self, m, n):
        if not hasattr(m, "rollback_state"):
            return False
        m.rollback_state(n)
        return True

    def forced(self, m):
        return None  # no fast-forward


def measure(lib, tokenizer, presets, repeats: int) -> dict:
    out = {"version": lib.version, "tokenizer": "accepted", "compile_ms": {}, "mask_ms": {}, "rollback": {},
           "forced_at_start": {}, "refused": {}}
    for name in presets:
        preset = get_preset(name)
        ids = tokenizer(answer(preset), add_special_tokens=False)["input_ids"]
        try:
            compiled, ms = timed(lambda p=preset: lib.compile(p.output_schema))
            m = lib.matcher(compiled)
        except Exception as e:  # noqa: BLE001  a refusal is a finding, named in the results
            out["refused"][name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
            continue
        out["compile_ms"][name] = round(ms, 2)
        forced = lib.forced(m)
        out["forced_at_start"][name] = forced
        times = []
        try:
            for _ in range(repeats):
                m = lib.matcher(compiled)
                for t in ids:
                    times.append(timed(lambda m=m: lib.mask(m))[1])
                    lib.advance(m, t)
        except Exception as e:  # noqa: BLE001  a matcher that refuses the preset's own answer is a finding
            out["refused"][name] = f"walking the answer: {type(e).__name__}: {e}"[:300]
            continue
        out["mask_ms"][name] = {"median": round(statistics.median(times), 4), "mean": round(statistics.mean(times), 4),
                                "max": round(max(times), 3), "positions": len(times)}
        m = lib.matcher(compiled)
        half = len(ids) // 2
        for t in ids[:half]:
            lib.advance(m, t)
        before = lib.mask(m)
        for t in ids[half:half + 4]:
            lib.advance(m, t)
        ok = lib.rollback(m, len(ids[half:half + 4]))
        out["rollback"][name] = bool(ok and torch.equal(lib.mask(m), before))
    return out


def target_step_ms(preset_name: str) -> dict:
    from playground.core.engine import plain_generate  # only --target-step loads the model
    from playground.core.records import Step  # (the same)
    from playground.pairs.loading import load_pair  # (the same)

    pair = load_pair(draft=None, progress=None)
    prompt = get_preset(preset_name).prompt_ids(pair.tokenizer)
    steps = [r.seconds for r in plain_generate(pair, prompt, max_new_tokens=16) if isinstance(r, Step)]
    return {"preset": preset_name, "median_ms": round(1000 * statistics.median(steps[1:]), 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--target-step", action="store_true", help="also time the embedded target's plain step")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    tokenizer = load_tokenizer(ensure_embedded_safetensors(progress=None))
    presets = schema_presets()
    results = {}
    for cls in (LLGuidance, XGrammar, OutlinesCore):
        try:
            lib = cls(tokenizer)
        except ImportError as e:
            results[cls.name] = {"installed": False, "why": str(e)}
            continue
        except Exception as e:  # noqa: BLE001  a tokenizer the library refuses is a finding
            results[cls.name] = {"installed": True, "tokenizer": f"refused: {type(e).__name__}: {e}"[:300]}
            continue
        results[cls.name] = measure(lib, tokenizer, presets, args.repeats)
    doc = {"experiment": "grammar-libraries", "what": "grammar libraries on the embedded tokenizer and the JSON presets' schemas (scripts/"
                   "grammar_libraries.py)", "separators": list(SEPARATORS), "presets": presets,
           "environment": environment().to_dict(),
           "libraries": results}
    if args.target_step:
        doc["target_step"] = target_step_ms(presets[0])
    text = json.dumps(doc, indent=1, default=str)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
