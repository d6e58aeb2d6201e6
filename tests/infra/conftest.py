"""The provider-free slice of infra/ (variables*.tf, scale.tf, modules/sizing),
copied and `terraform init`-ed once for the tests that plan it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.infra.terraform_cli import sizing_root


@pytest.fixture(scope="session")
def sizing_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sizing_root(tmp_path_factory.mktemp("sizing"))
