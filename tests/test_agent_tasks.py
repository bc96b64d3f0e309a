"""scripts/agent_tasks.py, the conversations `make_trace.py --agent` has the target answer: the tool families
prompt as the tool_call preset does (JSON tool schemas, the {name, arguments} reply format, a worked exchange as
few-shot messages before the first request), so the target writes tool calls. No model."""

import importlib.util
import json
from pathlib import Path

SPEC = importlib.util.spec_from_file_location("agent_tasks", Path(__file__).parents[1] / "scripts" / "agent_tasks.py")
agent_tasks = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(agent_tasks)


def test_tool_families_declare_json_tools_and_open_with_a_worked_call():
    tasks = agent_tasks.tasks(8)
    assert [cid for cid, _, _ in tasks] == ["weather-0", "orders-0", "code-0", "sql-0",
                                            "weather-1", "orders-1", "code-1", "sql-1"]
    for cid, system, steps in tasks:
        generated = [i for i, s in enumerate(steps) if s == agent_tasks.ASSISTANT]
        assert generated and all(s[1] is not None for s in steps[:generated[0]])  # examples only before the 1st
        if cid.startswith("code"):
            assert generated[0] == 1
            continue
        tools = json.loads(system.split("Tools:\n")[1].split("\n")[0])
        names = {t["name"] for t in tools}
        assert '{"name": <tool name>, "arguments": <object>}' in system
        examples = [json.loads(t) for r, t in steps[:generated[0]] if r == "assistant" and t.startswith("{")]
        assert len(examples) == 2 and {e["name"] for e in examples} <= names
        assert all(set(e["arguments"]) == set(t["parameters"]["required"])
                   for e in examples for t in tools if t["name"] == e["name"])
        assert [r for r, _ in steps[:generated[0]]] == ["user", "assistant", "tool", "assistant", "user",
                                                        "assistant", "user"]
        assert sum(r == "tool" for r, _ in steps[generated[0]:]) == 2  # two results the target must quote


def test_a_later_first_task_starts_a_trace_that_shares_no_task_with_the_earlier_one():
    early, late = agent_tasks.tasks(8), agent_tasks.tasks(8, first=8)
    assert [cid for cid, _, _ in late][:2] == ["weather-2", "orders-2"]  # the families keep their turns
    assert not {cid for cid, _, _ in early} & {cid for cid, _, _ in late}
    assert all(e[2] != l[2] for e, l in zip(early, late))  # other cities, orders, functions' requests
    assert agent_tasks.tasks(4, first=2)[0][0] == "code-0"
