"""The report's charts and tables, from hand-made figures (no Spark)."""

from __future__ import annotations

from pipeline.report import ReportData, build_report, tradeoff_figure


def _tradeoff() -> list[dict]:
    # acks too late fall to 0 and a backlogged room's rate to a small positive value as X grows
    return [
        {"timeout_ms": x, "share_too_late": late, "room_max_messages_per_s": rate}
        for x, late, rate in [(250.0, 0.92, 4.0), (3000.0, 0.05, 0.8), (60000.0, 0.0, 0.1), (120000.0, 0.0, 0.05)]
    ]


def test_tradeoff_axes_start_at_zero_so_no_rate_reads_negative():
    fig = tradeoff_figure(ReportData(summary={}, audit_checks={}, advice={}, tradeoff=_tradeoff()))
    left, right = fig.axes
    assert left.get_ylim()[0] == 0 and right.get_ylim()[0] == 0
    assert right.get_ylim()[1] >= 4.0 and left.get_ylim()[1] >= 92.0


def test_wide_tables_scroll_inside_the_page():
    wide = [{f"column_{i}": 123456.789 for i in range(20)}]
    html, _ = build_report(
        ReportData(summary={"x": 1}, audit_checks={}, advice={}, hourly=wide, reject_samples=[{"line": "x" * 300}])
    )
    assert "overflow-x:auto" in html
    assert html.count("<table>") == html.count("<div class=scroll><table>") > 0


def test_provider_table_leads_with_the_main_figures():
    providers = [
        {"provider": "messenger", "messages": 3, "acked_share": 1.0, "timed_out_share": 0.0, "timed_out": 0,
         "send_to_ack_p50_ms": 200.0, "rooms": 1},
        {"provider": "whatsapp", "messages": 2, "acked_share": 0.5, "timed_out_share": 0.5, "timed_out": 1,
         "send_to_ack_p50_ms": 500.0, "rooms": 1},
    ]  # fmt: skip
    html, _ = build_report(ReportData(summary={}, audit_checks={}, advice={}, providers=providers))
    section = html.split("<h2>By provider</h2>")[1].split("<h2>")[0]
    head = section.split("<thead>")[1].split("</thead>")[0]
    assert head.index("acked_share") < head.index("timed_out_share") < head.index("send_to_ack_p50_ms")
    assert "messenger" in section and "whatsapp" in section and "0.500" in section
