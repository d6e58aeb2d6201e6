"""Terraform itself, run on copies of infra/ (never in infra/, whose
`.terraform` and lock file stay the user's).

No provider can be downloaded on these machines, so what runs is what
Terraform does without one: `init -backend=false` on the whole
configuration (loading and checking every file and module; only the
provider download may fail), and `init` + `plan` of the provider-free slice
of the root module (its variables files, scale.tf and modules/sizing), which
evaluates every variable's validation blocks and the sizing module's
preconditions. A missing `terraform` binary fails the test that needs it:
nothing here is skipped.

Shapes: `plan(...)` returns a `Plan` with `ok` (exit status 0), `errors`
(the error diagnostics, each a `Diagnostic`) and `outputs` (the root's
planned output values, when ok).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
# The root module's variables files: variables.tf and one variables_<concern>.tf
# per concern (variables_delivery.tf, ...). No other file may declare a
# variable but scale.tf, the sizing's (test_variable_validations.py).
VARIABLE_FILES = "variables*.tf"


def slice_files() -> list[Path]:
    """The provider-free slice of the root module: every variables file
    (VARIABLE_FILES) and scale.tf, the sizing, as paths in infra/."""
    return [*sorted(INFRA.glob(VARIABLE_FILES)), INFRA / "scale.tf"]
# What a plan needs besides the defaults: the required variables.
REQUIRED_VARS = {"project_id": "my-chat-project", "whatsapp_phone_number_id": "123456789012345"}
# No version check against checkpoint-api.hashicorp.com, no colour, no prompts.
ENV = {"CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1", "TF_INPUT": "0"}


def binary() -> str:
    """The terraform binary (BATON_TERRAFORM, else `terraform` on PATH).

    Raises: pytest's Failed when it is missing: the checks it stands for
    must not pass unseen."""
    name = os.environ.get("BATON_TERRAFORM", "terraform")
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: `make test-infra` needs Terraform "
                    "(https://developer.hashicorp.com/terraform/install)")
    return path


def run(directory: Path, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """`terraform -chdir=directory args...`, its output captured (text)."""
    return subprocess.run([binary(), f"-chdir={directory}", *args], capture_output=True, text=True,
                          env={**os.environ, **ENV}, timeout=timeout_s, check=False)


@dataclass(frozen=True)
class Diagnostic:
    """One diagnostic of `terraform ... -json`: `summary`, `detail`, the
    `filename` it points at, and `context` (e.g. `variable "region"`)."""

    severity: str
    summary: str
    detail: str
    filename: str = ""
    context: str = ""
    traversals: tuple[str, ...] = ()  # the references whose values the diagnostic shows, e.g. var.region

    @property
    def variable(self) -> str | None:
        """The variable whose validation failed, if that is what this is."""
        if self.summary != "Invalid value for variable":
            return None
        names = [t.removeprefix("var.") for t in self.traversals if t.startswith("var.")]
        if self.context.startswith("variable "):
            names.insert(0, self.context.removeprefix("variable ").strip('"'))
        return names[0].split(".")[0].split("[")[0] if names else "?"

    @property
    def text(self) -> str:
        return " ".join(f"{self.summary} {self.detail}".split())


@dataclass
class Plan:
    ok: bool
    errors: list[Diagnostic] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    log: str = ""


def diagnostics(stdout: str) -> list[Diagnostic]:
    """The error diagnostics of a `-json` run's stdout (one JSON per line)."""
    found = []
    for line in stdout.splitlines():
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        diag = msg.get("diagnostic") if isinstance(msg, dict) else None
        if diag and diag.get("severity") == "error":
            found.append(Diagnostic(severity="error", summary=diag.get("summary", ""), detail=diag.get("detail", ""),
                                    filename=diag.get("range", {}).get("filename", ""),
                                    context=(diag.get("snippet") or {}).get("context") or "",
                                    traversals=tuple(v.get("traversal", "") for v in
                                                     (diag.get("snippet") or {}).get("values", []))))
    return found


def sizing_root(directory: Path) -> Path:
    """A copy of infra/'s provider-free slice in `directory`, initialised.

    Raises: AssertionError when `terraform init` fails (offline it must not:
    the slice has no provider)."""
    directory.mkdir(parents=True, exist_ok=True)
    for path in slice_files():
        shutil.copy(path, directory / path.name)
    shutil.copytree(INFRA / "modules", directory / "modules", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(".terraform*", "*.tfstate*"))
    done = run(directory, "init", "-backend=false", "-input=false", "-no-color")
    assert done.returncode == 0, f"terraform init of the sizing slice failed:\n{done.stdout}\n{done.stderr}"
    return directory


def plan(directory: Path, variables: dict[str, Any] | None = None, var_file: Path | None = None,
         required: bool = True) -> Plan:
    """`terraform plan` of an initialised slice with `variables` (a JSON
    tfvars file; `required` adds REQUIRED_VARS first) and `var_file`."""
    values = {**(REQUIRED_VARS if required else {}), **(variables or {})}
    tfvars = directory / "case.auto.tfvars.json"
    tfvars.write_text(json.dumps(values))
    extra = [f"-var-file={var_file}"] if var_file else []
    out = directory / "case.tfplan"
    out.unlink(missing_ok=True)
    done = run(directory, "plan", "-input=false", "-json", "-lock=false", f"-out={out}", *extra)
    log = done.stdout + done.stderr
    if done.returncode != 0:
        return Plan(ok=False, errors=diagnostics(done.stdout), log=log)
    shown = run(directory, "show", "-json", str(out))
    assert shown.returncode == 0, shown.stderr
    outputs = json.loads(shown.stdout).get("planned_values", {}).get("outputs", {})
    return Plan(ok=True, outputs={k: v.get("value") for k, v in outputs.items()}, log=log)
