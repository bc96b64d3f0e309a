"""Constrained decoding: a JSON schema (schema.py) compiled for the tokenizer (grammar.py, llguidance) and kept in
step with a run's committed tokens (guide.py). The engine takes a `Grammar` as LoopOptions.constraint."""
