"""The operators' console is not public (issue 48): it is the admin
function's /console/ route, so the admin function's access is the console's.
Offline, from the parsed infra/ (as tests/infra/test_terraform.py)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.infra.test_terraform import iam_grants, resource, tf  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "${google_cloudfunctions2_function.admin.name}"


def test_the_console_is_the_admin_functions_route_and_no_service_of_its_own(tf):  # noqa: F811
    main = (ROOT / "functions" / "main.py").read_text()
    # The `admin` entry point answers /console/ itself (no other entry point does).
    admin_fn = main[main.index("def admin(request"):]
    admin_fn = admin_fn[:admin_fn.index("\ndef ", 1)]
    assert 'startswith("/console/")' in admin_fn and "console_response" in admin_fn
    assert resource(tf, "google_cloudfunctions2_function", "admin")["build_config"]["entry_point"] == "admin"
    # No Cloud Run service, load balancer or bucket website serves it instead.
    kinds = set(tf["resource"])
    assert not kinds & {"google_cloud_run_v2_service", "google_cloud_run_service", "google_compute_backend_service",
                        "google_compute_url_map", "google_iap_web_iam_member"}


def test_only_the_operators_may_invoke_the_admin_function_and_so_the_console(tf):  # noqa: F811
    grants = [(t, n, b) for t, n, b in iam_grants(tf) if ADMIN in str(b.get("service", ""))]
    assert [(t, n) for t, n, _ in grants] == [("google_cloud_run_service_iam_member", "operators_invoke_admin")]
    body = grants[0][2]
    assert body["role"] == "roles/run.invoker" and body["member"] == "${each.value}"
    assert body["for_each"] == "${toset(var.operators)}"
    # Nothing anywhere makes it public.
    for _, _, b in iam_grants(tf):
        if ADMIN in str(b.get("service", "")):
            assert not re.search(r"allUsers|allAuthenticatedUsers", str(b))
    # var.operators cannot name allUsers or allAuthenticatedUsers (its validation).
    validation = tf["variable"]["operators"]["validation"]
    condition = (validation[0] if isinstance(validation, list) else validation)["condition"]
    pattern = re.search(r'regex\("(.+?)"', condition).group(1).replace("\\\\", "\\")
    for public in ("allUsers", "allAuthenticatedUsers", "user:allUsers:x"):
        assert not re.fullmatch(pattern, public)
    assert re.fullmatch(pattern, "group:oncall@example.com")
