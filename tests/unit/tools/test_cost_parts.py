"""`make cost` in parts (tools/bench/cost.py and its cost_*.py): each part is
a module a person reads in one sitting, and cost.py still answers for every
name of them; the deployment is read from Terraform's defaults, and a
default it cannot read is the ValueError its docstring names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tools.bench import cost, cost_inputs, cost_model, cost_prices, cost_report

BENCH = Path(cost.__file__).parent
PARTS = (cost_prices, cost_inputs, cost_model, cost_report)


def _variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, memory: str) -> None:
    """infra/variables*.tf stand-in holding every default `deployment` reads."""
    defaults = {"function_cpu": '"1"', "function_memory": f'"{memory}"', "function_threads": "8",
                "min_instances": "{ enqueue = 1, webhook = 1, status = 0 }", "webhook_mode": '"direct"',
                **{f"keep_{k}_in_default_bucket": "false"
                   for k in ("delivery_events", "request_logs", "routine_statuses", "relogged_events")}}
    path = tmp_path / "variables.tf"
    path.write_text("".join(f'variable "{name}" {{\n  type    = string\n  default = {value}\n}}\n\n'
                            for name, value in defaults.items()))
    monkeypatch.setattr(cost_inputs, "VARIABLE_FILES", [path])


def _defined(path: Path) -> list[str]:
    """The public names a module's source defines at its top level."""
    names = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [target.id for target in targets if isinstance(target, ast.Name)]
    return [name for name in names if not name.startswith("_")]


def test_each_part_is_under_400_lines_with_a_docstring_saying_what_it_holds() -> None:
    files = sorted(BENCH.glob("cost*.py"))
    assert [f.name for f in files] == ["cost.py", "cost_inputs.py", "cost_model.py", "cost_prices.py",
                                       "cost_report.py"]
    for path in files:
        text = path.read_text()
        assert len(text.splitlines()) < 400, path.name
        docstring = ast.get_docstring(ast.parse(text))
        assert docstring and len(docstring.split()) > 30, path.name
        # Composed by imports: no class of the model derives from another.
        assert not [n.name for n in ast.walk(ast.parse(text)) if isinstance(n, ast.ClassDef) and n.bases], path.name


def test_cost_answers_for_every_public_name_of_its_parts_with_the_same_object() -> None:
    """Tests and tools import the model as `from tools.bench import cost`;
    a monkeypatched `cost.ASSUMED` must be the dict the arithmetic reads."""
    for part in PARTS:
        assert part.__file__
        for name in _defined(Path(part.__file__)):
            assert getattr(cost, name) is getattr(part, name), f"{part.__name__}.{name}"
    assert cost.ASSUMED is cost_model.ASSUMED is cost_prices.ASSUMED


def test_the_deployment_is_read_from_the_variables_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _variables(tmp_path, monkeypatch, "2Gi")
    deploy = cost.deployment()
    assert deploy["memory_gib"] == 2 and deploy["cpu"] == 1.0 and deploy["threads"] == 8
    assert deploy["min_instances"] == {"enqueue": 1, "webhook": 1, "status": 0}
    assert deploy["keep_request_logs"] is False and deploy["webhook_mode"] == "direct"
    _variables(tmp_path, monkeypatch, "512Mi")
    assert cost.deployment()["memory_gib"] == 0.5


def test_an_unreadable_memory_default_is_a_value_error_naming_it(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The code before raised AttributeError ('NoneType' object has no
    attribute 'groups') for a size Cloud Run writes otherwise (1G, 1Ti)."""
    _variables(tmp_path, monkeypatch, "1G")
    with pytest.raises(ValueError, match="function_memory '1G'"):
        cost.deployment()
