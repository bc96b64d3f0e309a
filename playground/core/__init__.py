"""The loop and its pure parts: records, acceptance rules, sampling, the cost model, the clock, the cached
model, the proposer interface and the engine that runs propose / verify / accept / roll back.

Nothing here loads a model or knows a UI; rules and cost are pure functions.
"""
