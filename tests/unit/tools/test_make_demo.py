"""`make demo PROVIDERS=...` chooses the demo's providers only: make exports
a command-line variable into every recipe's environment, and PROVIDERS is
also the functions' setting (shared/config.py), so the stack's functions
would take it and refuse WhatsApp (issue 44, "Done when"). The demo target
runs with a stand-in interpreter that prints what it got."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_demo_passes_providers_as_an_argument_and_not_to_the_functions(tmp_path):
    py = tmp_path / "py"
    py.write_text('#!/bin/sh\necho "PROVIDERS_ENV=${PROVIDERS-unset}"\necho "ARGS=$*"\n')
    py.chmod(0o755)
    for providers in ("messenger", "messenger,instagram"):
        out = subprocess.run(["make", "-s", "demo", f"PY={py}", f"PROVIDERS={providers}", "ROOMS=3"], cwd=ROOT,
                             capture_output=True, text=True, timeout=120, check=True).stdout
        assert "PROVIDERS_ENV=unset" in out, out
        assert f"--providers {providers}" in out and "--rooms 3" in out
