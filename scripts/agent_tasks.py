"""Agent tasks for `make_trace.py --agent`: families of similar tasks an agent works through, one conversation
each, with tool calls, tool results it must quote back, and code it edits twice. Only the user's requests and
the tools' results are written here; every assistant turn is the target's own output (make_trace.py).

A conversation is a list of steps: ("user", text), ("tool", text), ("assistant", text) (a few-shot example the
agent's prompt carries, before the task's first request) or ASSISTANT (the target answers). The tool families
(weather, orders, sql) prompt the way the tool_call preset does: the reply format {"name", "arguments"}, the tools
as a JSON schema list, and one worked exchange (a call, its result, a one-sentence answer, a second call), so the
target writes real tool calls with the same skeleton conversation after conversation. Tool results
are fixed by the task's parameters, not by what the model asked: the trace is an agent's recording, and the
environment's answer is part of its input.
"""

from __future__ import annotations

import json

ASSISTANT = ("assistant", None)
CALL_FORMAT = ("You are an agent with tools. To use a tool, reply with a JSON object {\"name\": <tool name>, "
               "\"arguments\": <object>} and nothing else. When a tool's result comes back, answer the user in one "
               "or two sentences that quote it.\nTools:\n")
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


def _tool(name: str, description: str, **params) -> dict:
    """A tool's JSON schema as an OpenAI-style agent declares it (every parameter required)."""
    props = {k: (v if isinstance(v, dict) else {"type": v}) for k, v in params.items()}
    return {"name": name, "description": description,
            "parameters": {"type": "object", "properties": props, "required": list(props)}}


def _call(name: str, **arguments) -> str:
    return json.dumps({"name": name, "arguments": arguments})


def _system(tools: list[dict], *notes: str) -> str:
    """The tool_call preset's style: the reply format, the tools as a JSON schema list, then any notes."""
    return CALL_FORMAT + json.dumps(tools) + "".join("\n" + n for n in notes)


def _example(*steps) -> list:
    """A worked exchange the conversation opens with: few-shot messages, part of the agent's prompt (an assistant
    step with its text is an example the target did not write; make_trace.py marks them as context)."""
    return list(steps)


WEATHER_TOOLS = [_tool("get_weather", "Current weather for a city", city="string",
                       unit={"enum": ["celsius", "fahrenheit"]}),
                 _tool("get_forecast", "Daily forecast for a city", city="string", days="integer")]
ORDER_TOOLS = [_tool("lookup_order", "An order's delivery status", order_id="string"),
               _tool("refund", "Refund an order", order_id="string", reason="string")]
SQL_TOOLS = [_tool("run_sql", "Run a SQL query on tables orders(id, customer_id, total, created_at) and "
                   "customers(id, name, country)", query="string")]


def weather(i: int) -> tuple[str, list]:
    city, unit, cond = CITIES[i % len(CITIES)], ("celsius", "fahrenheit")[i % 2], CONDITIONS[i % len(CONDITIONS)]
    days = 2 + i % 3
    forecast = [{"day": d + 1, "high": 14 + (i + d) % 9, "low": 6 + (i + d) % 5,
                 "conditions": CONDITIONS[(i + d) % len(CONDITIONS)]} for d in range(days)]
    example = _example(
        ("user", "Is it cold in Tokyo today? Give me fahrenheit."),
        ("assistant", _call("get_weather", city="Tokyo", unit="fahrenheit")),
        ("tool", _json(city="Tokyo", temperature=41, unit="fahrenheit", conditions="clear", wind_kmh=12)),
        ("assistant", "It is 41 fahrenheit and clear in Tokyo, with wind at 12 km/h."),
        ("user", "What about the next 2 days in Tokyo?"),
        ("assistant", _call("get_forecast", city="Tokyo", days=2)))
    return (_system(WEATHER_TOOLS), example + [
        ("user", f"What's the weather like in {city} right now, in {unit}?"), ASSISTANT,
        ("tool", _json(city=city, temperature=10 + i % 17, unit=unit, conditions=cond, wind_kmh=5 + i % 20)),
        ASSISTANT,
        ("user", f"And the forecast for {city} for the next {days} days?"), ASSISTANT,
        ("tool", _json(city=city, days=forecast)), ASSISTANT])


def orders(i: int) -> tuple[str, list]:
    oid, status = f"A-{48213 + 7919 * i % 90000}", STATUSES[i % len(STATUSES)]
    example = _example(
        ("user", "Where is my order B-10442?"),
        ("assistant", _call("lookup_order", order_id="B-10442")),
        ("tool", _json(order_id="B-10442", status="Delivered to the parcel locker on Main Street.", items=2)),
        ("assistant", "Your order B-10442 says: Delivered to the parcel locker on Main Street."),
        ("user", "I never got it. Please refund it."),
        ("assistant", _call("refund", order_id="B-10442", reason="Not received")))
    return (_system(ORDER_TOOLS, "Quote the order's status text exactly."), example + [
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
    q = ("SELECT c.city, SUM(o.total) AS total FROM orders o JOIN customers c ON c.id = o.customer_id "
         "WHERE strftime('%Y', o.created_at) = '{}' GROUP BY c.city ORDER BY total DESC LIMIT 2")
    example = _example(
        ("user", "Which two cities had the highest order totals in 2018?"),
        ("assistant", _call("run_sql", query=q.format(2018))),
        ("tool", _json(rows=[["Lyon", 90210.0], ["Porto", 70500.25]], column="c.city")),
        ("assistant", "In 2018 the top two were Lyon (90210.0) and Porto (70500.25)."),
        ("user", "Now the same for 2017."),
        ("assistant", _call("run_sql", query=q.format(2017))))
    return (_system(SQL_TOOLS), example + [
        ("user", f"Which three {group} had the highest order totals in {year}?"), ASSISTANT,
        ("tool", _json(rows=rows, column=col)), ASSISTANT,
        ("user", f"Now the same for {year + 1}."), ASSISTANT,
        ("tool", _json(rows=rows[::-1], column=col)), ASSISTANT])


FAMILIES = (weather, orders, code, sql)


def tasks(conversations: int, first: int = 0) -> list[tuple[str, str, list]]:
    """(id, system prompt, steps) for `conversations` conversations, the families taking turns, starting at task
    `first`: two traces whose ranges do not overlap hold different tasks (a tuning trace and a held-out one),
    up to each family's cycle of parameters (12 cities, 4 order statuses, 4 functions)."""
    out = []
    for c in range(first, first + conversations):
        family = FAMILIES[c % len(FAMILIES)]
        system, steps = family(c // len(FAMILIES))
        out.append((f"{family.__name__}-{c // len(FAMILIES)}", system, steps))
    return out
