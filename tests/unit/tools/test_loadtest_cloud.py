"""The cloud load test's plan, offline (issue 30, item 6): it cannot run
here, so its `--dry-run` plan is what is checked: what it deploys, publishes,
judges and tears down, and that bad arguments are refused clearly."""

from __future__ import annotations

import re
import subprocess
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest
import requests

from tools.cloud.loadtest import __main__ as cli
from tools.cloud.loadtest.plan import REQUIRED_VARS, LoadTest, build
from tools.cloud.loadtest.publish import published_ids, workload
from tools.cloud.loadtest.workdir import copy_infra
from tools.sim.fake_platform.config import FakeConfig
from tools.sim.fake_platform.platform import FakeGraphApi
from tools.sim.fake_platform.server import make_handler

ROOT = Path(__file__).resolve().parents[3]


def plan(**kw):
    return build(LoadTest("my-project-1", **kw))


def test_the_plan_deploys_the_fake_then_baton_pointed_at_it():
    steps = plan()
    commands = [" ".join(s.argv) for s in steps]
    fake = next(i for i, c in enumerate(commands) if " run deploy baton-lt-fake-platform " in c)
    assert "--source=." in commands[fake]
    apply = next(i for i, c in enumerate(commands)
                 if c.startswith("terraform -chdir={out}/infra apply -auto-approve -input=false -var"))
    assert fake < apply and "-var=whatsapp_api_base={fake_url}" in commands[apply]
    assert "-var=name_prefix=baton-lt" in commands[apply]
    # the fake's URL is read before the apply uses it
    assert any(s.capture == "fake_url" for s in steps[fake:apply])


def test_the_plan_publishes_at_the_chosen_rate_and_judges_like_make_chaos():
    steps = plan(rooms=300, messages=4, rate=750)
    publish = [s for s in steps if s.phase == "publish"]
    assert len(publish) == 1 and "--rate=750" in publish[0].argv and "--rooms=300" in publish[0].argv
    verdict = [s for s in steps if s.phase == "verdict"]
    assert [s.save for s in verdict[:2]] == ["stats.json", "events.json"]
    assert "tools.cloud.loadtest.verdict" in verdict[2].argv
    assert {s.phase for s in steps} >= {"monitoring"}


def test_teardown_comes_last_and_removes_what_the_run_made():
    steps = plan()
    phases = [s.phase for s in steps]
    first_teardown = phases.index("teardown")
    assert set(phases[first_teardown:]) == {"teardown"}
    commands = [" ".join(s.argv) for s in steps[first_teardown:]]
    assert any("terraform -chdir={out}/infra destroy" in c for c in commands)
    assert any("run services delete baton-lt-fake-platform" in c for c in commands)


@pytest.mark.parametrize("kw, message", [
    ({"project": "X"}, "--project"), ({"region": "europe"}, "--region"), ({"name_prefix": "baton"}, "--name-prefix"),
    ({"rooms": 0}, "--rooms"), ({"rate": 0}, "--rate"), ({"rate": 60_000}, "--rate"),
])
def test_bad_arguments_are_refused_with_the_argument_named(kw, message):
    args = {"project": "my-project-1", **kw}
    with pytest.raises(ValueError, match=message):
        build(LoadTest(**args))


def test_dry_run_prints_every_step_and_runs_nothing(monkeypatch, capsys):
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail(f"ran {a[0]}"))
    assert cli.main(["--project", "my-project-1", "--dry-run", "--rate", "200"]) == 0
    out = capsys.readouterr().out
    assert "nothing is run" in out and out.count("\n 1. ") == 1
    assert len([line for line in out.splitlines() if line[:3].strip().rstrip(".").isdigit()]) == len(
        build(LoadTest("my-project-1", rate=200)))


def test_a_failed_step_skips_to_the_teardown(monkeypatch, tmp_path):
    ran: list[str] = []

    def fake_run(argv, **kw):
        ran.append(" ".join(argv))
        failing = "tools.cloud.loadtest.publish" in argv
        return SimpleNamespace(returncode=1 if failing else 0, stdout="https://fake.example\n")

    monkeypatch.setattr(subprocess, "run", fake_run)
    assert cli.run(build(LoadTest("my-project-1")), tmp_path) == 1
    after = ran[next(i for i, c in enumerate(ran) if "tools.cloud.loadtest.publish" in c) + 1:]
    assert after and all("destroy" in c or "delete" in c for c in after)


def test_the_published_set_is_every_message_of_every_room():
    ids = published_ids("lt", 3, 2)
    assert len(ids) == 6 and "lt-r000002-m2" in ids
    first_round = [m.message_id for m in workload("lt", 3, 2)][:3]
    assert all(i.endswith("-m1") for i in first_round)


def required_variables() -> set[str]:
    """infra/'s variables with no default (read from the .tf files)."""
    names = set()
    for path in (ROOT / "infra").glob("*.tf"):
        for name, body in re.findall(r'^variable "([^"]+)" \{\n(.*?)^\}', path.read_text(), re.M | re.S):
            if not re.search(r"^  default\s*=", body, re.M):
                names.add(name)
    return names


def test_every_required_variable_is_passed_and_the_production_tfvars_never_read():
    assert required_variables() == set(REQUIRED_VARS)
    steps = plan(rate=2_000)
    terraform = [s for s in steps if s.argv[0] == "terraform"]
    copy = next(i for i, s in enumerate(steps) if "tools.cloud.loadtest.workdir" in s.argv)
    assert copy < steps.index(terraform[0])
    for step in terraform:
        # never infra/ itself, whose terraform.tfvars, *.auto.tfvars and backend.tf Terraform would read
        assert step.argv[1] == "-chdir={out}/infra", step.argv
        assert not any("tfvars" in a or "backend" in a for a in step.argv), step.argv
        if step.argv[2] in ("apply", "destroy"):
            given = {a.removeprefix("-var=").split("=", 1)[0] for a in step.argv if a.startswith("-var=")}
            assert set(REQUIRED_VARS) | {"whatsapp_senders", "whatsapp_api_base", "target_peak_messages_per_s",
                                         "source_archive", "name_prefix"} <= given, step.argv
            assert "-var=target_peak_messages_per_s=2000" in step.argv


def test_the_senders_carry_the_rate_the_deployment_is_sized_for():
    for rate in (1, 100, 950, 2_000, 30_000):
        numbers = LoadTest("my-project-1", rate=rate).senders.split(",")
        assert len(numbers) * 950 / 1.05 * 0.7 >= rate and len({n.split(":")[0] for n in numbers}) == len(numbers)


def test_the_copy_of_infra_leaves_the_production_deployment_out(tmp_path):
    source = tmp_path / "infra"
    (source / ".terraform").mkdir(parents=True)
    (source / "modules" / "sizing").mkdir(parents=True)
    for name in ("main.tf", "terraform.tfvars", "prod.auto.tfvars", "x.auto.tfvars.json", "backend.tf",
                 "terraform.tfstate", ".terraform.lock.hcl", "modules/sizing/main.tf"):
        (source / name).write_text("# " + name)
    skipped = copy_infra(source, tmp_path / "copy")
    copied = {str(p.relative_to(tmp_path / "copy")) for p in (tmp_path / "copy").rglob("*") if p.is_file()}
    assert copied == {"main.tf", ".terraform.lock.hcl", "modules/sizing/main.tf"}
    assert {"terraform.tfvars", "backend.tf", "prod.auto.tfvars"} <= set(skipped)


def test_the_fake_is_public_and_every_call_needs_the_token_baton_sends():
    steps = plan()
    deploy = next(s for s in steps if " run deploy " in " ".join(s.argv))
    assert "--allow-unauthenticated" in deploy.argv and "--no-allow-unauthenticated" not in deploy.argv
    entry = next(a for a in deploy.argv if a.startswith("--set-build-env-vars=GOOGLE_ENTRYPOINT="))
    assert "--access-token $APP_SECRET" in entry and "--control-token $APP_SECRET" in entry
    assert "APP_SECRET={token}" in " ".join(deploy.argv)
    # baton's access token (what its send path sends as the bearer) is the same token
    secret = next(s for s in steps if "baton-lt-whatsapp-access-token" in s.argv)
    assert secret.stdin == "token"
    # one instance: the fake's record of sends lives in its memory
    assert "--max-instances=1" in deploy.argv
    readers = [s for s in steps if "/_fake/stats" in " ".join(s.argv) or "tools.cloud.loadtest.drain" in s.argv]
    assert len(readers) == 2 and all(s.stdin in ("token", "control_header") for s in readers)
    assert not any("identity" in " ".join(s.argv) for s in steps)


def test_the_fake_refuses_its_controls_and_sends_without_the_token():
    fake = FakeGraphApi("http://127.0.0.1:9/", "s3cret", "s3cret", FakeConfig(), ())
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(fake, "s3cret"))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert requests.get(f"{base}/_fake/stats", timeout=5).status_code == 401
        assert requests.post(f"{base}/_fake/reset", json={}, timeout=5).status_code == 401
        assert requests.get(f"{base}/_fake/stats", headers={"Authorization": "Bearer wrong"}, timeout=5).status_code == 401
        assert requests.get(f"{base}/_fake/stats", headers={"Authorization": "Bearer s3cret"}, timeout=5).status_code == 200
        assert requests.get(f"{base}/_fake/health", timeout=5).status_code == 200
        send = {"messaging_product": "whatsapp", "to": "15550001", "type": "text", "text": {"body": "hi"}}
        assert requests.post(f"{base}/v21.0/100000000000001/messages", json=send, timeout=5).status_code == 401
    finally:
        server.shutdown()
        server.server_close()
