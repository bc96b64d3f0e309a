"""Agent tasks for `make_trace.py --agent`: families of similar tasks an agent works through, one conversation
each, with tool calls, tool results it must quote back, and code it edits twice. Only the user's requests and
the tools' results are written here; every assistant turn is the target's own output (make_trace.py).

A conversation is a list of steps: ("user", text), ("tool", text) or ASSISTANT (the target answers). Tool results
are fixed by the task's parameters, not by what the model asked: the trace is an agent's recording, and the
environment's answer is part of its input.
"""

from __future__ import annotations

import json

ASSISTANT = ("assistant", None)
TOOLS_SYSTEM = ("You are an agent that answers with tool calls when a tool can help. Reply to a tool result in one "
                "or two sentences. Tools:\n")
CITIES = ("Lisbon", "Oslo", "Madrid", "Berlin", "Rome", "Vienna", "Dublin", "Prague", "Warsaw", "Athens", "Zurich",
          "Paris")
CONDITIONS = ("sunny", "cloudy", "light rain", "windy", "overcast", "clear")
STATUSES = ("Delayed at the regional sorting centre in Lyon; new delivery estimate: Friday 21 March.",
            "Returned to sender: the address label was damaged in transit.",
            "Out for delivery today between 14:00 and 18:00.",
            "Held at customs pending an import declaration.")
FUNCTIONS = {
    "mean": "def mean(xs):\n    return sum(xs) / len(xs)",
    "maximum": "def maximum(xs):\n    best = xs[0]\n    for x in xs[1:]:\n        if x > best:\n            best = x\n    return best",
    "spread": "def spread(xs):\n    return max(xs) - min(xs)",
    "median": "def median(xs):\n    s = sorted(xs)\n    n = len(s)\n    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2",
}


def _json(**kw) -> str:
    return json.dumps(kw)


def weather(i: int) -> tuple[str, list]:
    city, unit, cond = CITIES[i % len(CITIES)], ("celsius", "fahrenheit")[i % 2], CONDITIONS[i % len(CONDITIONS)]
    days = 2 + i % 3
    forecast = [{"day": d + 1, "high": 14 + (i + d) % 9, "low": 6 + (i + d) % 5,
                 "conditions": CONDITIONS[(i + d) % len(CONDITIONS)]} for d in range(days)]
    return ((TOOLS_SYSTEM + 'get_weather(city: string, unit: "celsius" | "fahrenheit")\nget_forecast(city: string, '
             "days: integer)"), [
                ("user", f"What's the weather like in {city} right now, in {unit}?"), ASSISTANT,
                ("tool", _json(city=city, temperature=10 + i % 17, unit=unit, conditions=cond, wind_kmh=5 + i % 20)),
                ASSISTANT,
                ("user", f"And the forecast for {city} for the next {days} days?"), ASSISTANT,
                ("tool", _json(city=city, days=forecast)), ASSISTANT])


def orders(i: int) -> tuple[str, list]:
    oid, status = f"A-{48213 + 7919 * i % 90000}", STATUSES[i % len(STATUSES)]
    return ((TOOLS_SYSTEM + "lookup_order(order_id: string)\nrefund(order_id: string, reason: string)\nQuote the "
             "order's status text exactly."), [
                ("user", f"Where is my order {oid}? It should have arrived last week."), ASSISTANT,
                ("tool", _json(order_id=oid, status=status, items=1 + i % 4)), ASSISTANT,
                ("user", "That is too late for me. Please refund it."), ASSISTANT,
                ("tool", _json(order_id=oid, refunded=True, amount=round(19.9 + 13.5 * (i % 7), 2),
                               status="Refund issued to the original payment method.")), ASSISTANT])


def code(i: int) -> tuple[str, list]:
    name = list(FUNCTIONS)[i % len(FUNCTIONS)]
    return ("You are a coding agent. Answer with the complete Python code in one code block, then one sentence.", [
        ("user", (f"This function crashes on an empty list. Fix it so that it returns None then.\n```python\n"
                  f"{FUNCTIONS[name]}\n```")), ASSISTANT,
        ("user", "Now add type hints and a docstring, and keep the rest as it is."), ASSISTANT,
        ("user", f"Rename it to {name}_of and show the whole function again."), ASSISTANT])


def sql(i: int) -> tuple[str, list]:
    year, group = 2019 + i % 6, ("countries", "customers")[i % 2]
    col = "c.country" if group == "countries" else "c.name"
    rows = [[("Germany", "France", "Spain", "Italy")[(i + r) % 4] if group == "countries" else
             ("Ana Ruiz", "Li Wei", "Sam Okafor", "Mia Novak")[(i + r) % 4], round(182340.5 - 31000 * r - 97 * i, 2)]
            for r in range(3)]
    return ((TOOLS_SYSTEM + "run_sql(query: string) on tables orders(id, customer_id, total, created_at) and "
             "customers(id, name, country)"), [
                ("user", f"Which three {group} had the highest order totals in {year}?"), ASSISTANT,
                ("tool", _json(rows=rows, column=col)), ASSISTANT,
                ("user", f"Now the same for {year + 1}."), ASSISTANT,
                ("tool", _json(rows=rows[::-1], column=col)), ASSISTANT])


FAMILIES = (weather, orders, code, sql)


def tasks(conversations: int) -> list[tuple[str, str, list]]:
    """(id, system prompt, steps) for `conversations` conversations, the families taking turns."""
    out = []
    for c in range(conversations):
        family = FAMILIES[c % len(FAMILIES)]
        system, steps = family(c // len(FAMILIES))
        out.append((f"{family.__name__}-{c // len(FAMILIES)}", system, steps))
    return out
