"""The cloud load test's plan, offline (issue 30, item 6): it cannot run
here, so its `--dry-run` plan is what is checked: what it deploys, publishes,
judges and tears down, and that bad arguments are refused clearly."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

import pytest

from tools.loadtest_cloud import __main__ as cli
from tools.loadtest_cloud.plan import LoadTest, build
from tools.loadtest_cloud.publish import published_ids, workload


def plan(**kw):
    return build(LoadTest("my-project-1", **kw))


def test_the_plan_deploys_the_fake_then_baton_pointed_at_it():
    steps = plan()
    commands = [" ".join(s.argv) for s in steps]
    fake = next(i for i, c in enumerate(commands) if " run deploy baton-lt-fake-platform " in c)
    assert "--source=." in commands[fake] and "--no-allow-unauthenticated" in commands[fake]
    apply = next(i for i, c in enumerate(commands) if c.startswith("terraform -chdir=infra apply -auto-approve -var"))
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
    assert "tools.loadtest_cloud.verdict" in verdict[2].argv
    assert {s.phase for s in steps} >= {"monitoring"}


def test_teardown_comes_last_and_removes_what_the_run_made():
    steps = plan()
    phases = [s.phase for s in steps]
    first_teardown = phases.index("teardown")
    assert set(phases[first_teardown:]) == {"teardown"}
    commands = [" ".join(s.argv) for s in steps[first_teardown:]]
    assert any("terraform -chdir=infra destroy" in c for c in commands)
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
        failing = "tools.loadtest_cloud.publish" in argv
        return SimpleNamespace(returncode=1 if failing else 0, stdout="https://fake.example\n")

    monkeypatch.setattr(subprocess, "run", fake_run)
    assert cli.run(build(LoadTest("my-project-1")), tmp_path) == 1
    after = ran[next(i for i, c in enumerate(ran) if "tools.loadtest_cloud.publish" in c) + 1:]
    assert after and all("destroy" in c or "delete" in c or "workspace select default" in c for c in after)


def test_the_published_set_is_every_message_of_every_room():
    ids = published_ids("lt", 3, 2)
    assert len(ids) == 6 and "lt-r000002-m2" in ids
    first_round = [m.message_id for m in workload("lt", 3, 2)][:3]
    assert all(i.endswith("-m1") for i in first_round)
