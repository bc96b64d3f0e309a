"""`speed --schema` / `sweep --schema`: every arm also run constrained to a JSON schema, beside the free one.

With a constraint (SpeedRequest.constraint, a constraints.grammar.Grammar) each arm of a prompt's round runs twice
in a row, free then constrained (`interleaved`: "plain", "plain|schema", "k=3", "k=3|schema", ...), so the two
see the same machine. The constrained speculative runs use the schema+ variant of the drafter
(`constrained_drafter`: it proposes the tokens the grammar forces, then the drafter's own guesses; a drafter with
no such variant runs as itself) and are divided by constrained plain decoding at their moment (interpolated
between the constrained plain runs around them, as the free runs are): the speed-up of constrained speculative
over constrained plain. Beside it, per k: tokens per target pass constrained against free, and the forced share
(the kept tokens the schema forced, of the run's new tokens). No prediction is made for the constrained arms.
"""

from __future__ import annotations

from functools import partial

from ...core.records import RunSummary
from ...drafters import registry
from ...results.speed import ConstrainedRun, SchemaCell, SpeedResult, SpeedRun
from ...run import compile_schema
from ...tables import fmt, markdown_table, median_of

SCHEMA = "|schema"


def interleaved(order: list[str]) -> list[str]:
    """Each arm of `order`, then the same arm constrained."""
    return [a for arm in order for a in (arm, arm + SCHEMA)]


def constrained_drafter(pair, drafter: str) -> str:
    """The drafter a constrained arm runs: the schema+ variant of `drafter` ("auto": of the one it picks) where one
    is declared, else `drafter` itself."""
    name = registry.default_drafter(pair)[0] if drafter == "auto" else drafter
    if registry.drafter_spec(name).schema:
        return name
    return registry.schema_variant(name) or name


def schema_arms(pair, drafter: str, schema, **proposer_options) -> dict:
    """SpeedRequest's `constraint` and `constrained_proposer` for `schema` (anything schema_from reads: a preset's
    name, a file, a Schema): the grammar every arm also runs constrained to, and a new proposer of the drafter's
    schema+ variant for each constrained arm. {} without a schema."""
    if schema is None:
        return {}
    return {"constraint": compile_schema(schema, pair.tokenizer),
            "constrained_proposer": partial(registry.make_proposer, pair, constrained_drafter(pair, drafter),
                                            **proposer_options)}


def constrained_run(summary: RunSummary, plain) -> ConstrainedRun:
    """A constrained speculative run's figures against constrained plain decoding at its moment (`plain`:
    lab.speed's interpolated _Plain)."""
    p = plain.tokens_per_s
    return ConstrainedRun(ratio=summary.tokens_per_s / p if p else None, spec_tokens_per_s=summary.tokens_per_s,
                          plain_tokens_per_s=p, tokens_per_pass=summary.tokens_per_pass,
                          forced_share=summary.forced_share or 0.0, alpha=summary.alpha,
                          new_tokens=summary.new_tokens, plain_new_tokens=plain.new_tokens,
                          finished=summary.finished)


def schema_cell(runs: list[SpeedRun]) -> SchemaCell | None:
    """Medians over the constrained runs of one k's runs (None: they ran free only)."""
    held = [x for x in runs if x.schema is not None]
    if not held:
        return None
    ratios = [x.schema.ratio for x in held if x.schema.ratio is not None]
    return SchemaCell(median_ratio=median_of(ratios), min_ratio=min(ratios, default=None),
                      max_ratio=max(ratios, default=None), tokens_per_pass=median_of(x.schema.tokens_per_pass for x in held),
                      free_tokens_per_pass=median_of(x.tokens_per_pass for x in held),
                      forced_share=median_of(x.schema.forced_share for x in held), n=len(held))


def schema_cells(doc: SpeedResult) -> list[list[str]]:
    """Per k with constrained runs: k, the constrained speed-up, its min-max, tokens per pass free and constrained,
    the forced share, each as printed ([]: no schema)."""
    return [[str(r.k), fmt(r.schema.median_ratio),
             f"{r.schema.min_ratio:.2f}-{r.schema.max_ratio:.2f}" if r.schema.min_ratio is not None else "-",
             fmt(r.schema.free_tokens_per_pass), fmt(r.schema.tokens_per_pass), fmt(r.schema.forced_share, ".0%")]
            for r in doc.table if r.schema is not None]


def schema_lines(doc: SpeedResult) -> list[str]:
    """The report's lines for a constrained measurement: per k over every prompt, the constrained speed-up over
    constrained plain, tokens per target pass free and constrained, and the forced share (none: no schema)."""
    cells = schema_cells(doc)
    if not cells:
        return []
    head = ["k", "constrained speed-up (over constrained plain)", "min-max", "tokens/pass free",
            "tokens/pass constrained", "forced share"]
    return ["", (f"constrained to {doc.schema or 'a schema'}: each arm run again right after its free run, with the "
            "schema's forced tokens proposed first; medians over every prompt's rounds"), "", markdown_table(head, cells)]
