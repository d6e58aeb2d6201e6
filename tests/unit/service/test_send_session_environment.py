"""The platform client's HTTP session reads its environment once
(shared/providers/graph.py `environment_read_once`): a send call gets the
proxies, CA bundle and .netrc login requests would have read for it."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from shared.providers.graph import environment_read_once, session_without_retries

URL = "https://graph.example.test/v21.0/123"
ENVIRONMENTS = {
    "none": {},
    "proxies": {"HTTPS_PROXY": "http://proxy.test:3128", "HTTP_PROXY": "http://proxy.test:3129"},
    "bypassed": {"HTTPS_PROXY": "http://proxy.test:3128", "NO_PROXY": "graph.example.test"},
    "ca_bundle": {"REQUESTS_CA_BUNDLE": "/etc/ssl/baton-test.pem"},
    "curl_bundle": {"CURL_CA_BUNDLE": "/etc/ssl/baton-curl.pem"},
}
ALL_NAMES = {n for env in ENVIRONMENTS.values() for n in env} | {"NETRC", "https_proxy", "http_proxy", "no_proxy",
                                                                  "ALL_PROXY", "all_proxy"}


def settings_of_a_call(session: requests.Session, url: str) -> tuple[dict, dict, object]:
    """What a call of `session` to `url` is made with: proxies, verify and cert; its auth header."""
    merged = session.merge_environment_settings(url, {}, None, None, None)
    prepared = session.prepare_request(requests.Request("POST", url, json={}))
    return ({k: merged[k] for k in ("proxies", "verify", "cert")},
            {k: v for k, v in prepared.headers.items() if k == "Authorization"}, merged["stream"])


@pytest.mark.parametrize("name", ENVIRONMENTS)
@pytest.mark.parametrize("netrc", [False, True], ids=["no_netrc", "netrc"])
def test_a_call_gets_what_requests_would_have_read(name, netrc, monkeypatch, tmp_path: Path):
    for n in ALL_NAMES:
        monkeypatch.delenv(n, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc of this machine
    for n, v in ENVIRONMENTS[name].items():
        monkeypatch.setenv(n, v)
    if netrc:
        (tmp_path / "netrc").write_text("machine graph.example.test login baton password s3cret\n")
        monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    before = settings_of_a_call(session_without_retries(), URL)
    once = environment_read_once(session_without_retries(), URL)
    assert not once.trust_env
    assert settings_of_a_call(once, URL) == before
    assert settings_of_a_call(once, URL + "/media") == settings_of_a_call(session_without_retries(), URL + "/media")
