"""The suite's own environment (issue 43, "the checks can fail"): the
session's stack keeps its test settings (TEST_ENV) out of this process's
environment, so a stack started later in the same run (chaos, senders,
operator day) runs the deployed defaults; and an end-to-end test whose stack
would inherit another test's settings fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import TEST_ENV, inherited_settings, session_stack, stack_settings

ROOT = Path(__file__).resolve().parents[3]


class LeakyStack:
    """A stack whose start writes into os.environ, as tools.local.stack.Stack's
    provisioning does (its client environment), plus a setting."""

    stopped = False

    def start(self) -> LeakyStack:
        os.environ.update({"FIRESTORE_EMULATOR_HOST": "127.0.0.1:1", "WHATSAPP_SENT_PROOF": "off"})
        return self

    def client_env(self) -> dict[str, str]:
        return {"FIRESTORE_EMULATOR_HOST": "127.0.0.1:1"}

    def stop(self) -> None:
        self.stopped = True


def test_the_session_stack_leaves_only_its_client_environment(monkeypatch):
    monkeypatch.delenv("WHATSAPP_SENT_PROOF", raising=False)
    monkeypatch.delenv("FIRESTORE_EMULATOR_HOST", raising=False)
    before = dict(os.environ)
    with session_stack(lambda: LeakyStack().start()) as s:
        assert inherited_settings() == {}  # a stack started now gets the defaults
        assert os.environ["FIRESTORE_EMULATOR_HOST"] == "127.0.0.1:1"
    assert s.stopped and dict(os.environ) == before


def test_a_leaked_setting_is_found(monkeypatch):
    monkeypatch.setenv("WHATSAPP_SENT_PROOF", "off")
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:2")  # where an emulator is: not a setting
    assert inherited_settings() == {"WHATSAPP_SENT_PROOF": "off"}


def test_the_in_process_test_settings_are_the_stacks_and_leave_nothing(monkeypatch):
    monkeypatch.delenv("WHATSAPP_SENT_PROOF", raising=False)
    settings = stack_settings()
    assert settings.whatsapp_sent_proof == TEST_ENV["WHATSAPP_SENT_PROOF"]
    assert settings.ack_timeout_ms == int(TEST_ENV["ACK_TIMEOUT_MS"])
    assert "WHATSAPP_SENT_PROOF" not in os.environ


def run_e2e_test(tmp_path: Path, extra_env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run one end-to-end-like test (under an `e2e` folder) with the suite's
    conftest guard, in a process whose environment adds `extra_env`."""
    (tmp_path / "conftest.py").write_text("from tests.conftest import _own_stacks_run_the_defaults  # noqa: F401\n")
    (tmp_path / "e2e").mkdir(exist_ok=True)
    (tmp_path / "e2e" / "test_own_stack.py").write_text("def test_defaults():\n    pass\n")
    env = {k: v for k, v in os.environ.items() if k not in inherited_settings()}
    env.update(PYTHONPATH=str(ROOT), **extra_env)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "e2e")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_an_e2e_test_with_its_own_stack_fails_on_a_leaked_setting(tmp_path):
    """The autouse guard of tests/conftest.py, on a test under e2e/."""
    clean = run_e2e_test(tmp_path, {})
    assert clean.returncode == 0, clean.stdout + clean.stderr
    leaked = run_e2e_test(tmp_path, {"WHATSAPP_SENT_PROOF": "off"})
    assert leaked.returncode != 0 and "1 error" in leaked.stdout, leaked.stdout
    assert "WHATSAPP_SENT_PROOF" in leaked.stdout


def test_what_an_own_stack_writes_into_the_environment_is_undone_after_its_test(tmp_path):
    (tmp_path / "conftest.py").write_text("from tests.conftest import _own_stacks_run_the_defaults  # noqa: F401\n")
    (tmp_path / "e2e").mkdir()
    (tmp_path / "e2e" / "test_two.py").write_text(
        "import os\n\n"
        "def test_a_own_stack_provisions():\n    os.environ['FIRESTORE_EMULATOR_HOST'] = '127.0.0.1:9'\n\n"
        "def test_b_later_test():\n    assert os.environ.get('FIRESTORE_EMULATOR_HOST') != '127.0.0.1:9'\n")
    env = {k: v for k, v in os.environ.items() if k not in inherited_settings() and k != "FIRESTORE_EMULATOR_HOST"}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "e2e")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout
