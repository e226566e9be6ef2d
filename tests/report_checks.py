"""What a quick report on a network users bring must hold (shared by test_report.py, for the
zoo's networks, and test_examples.py, for the networks the examples measure)."""


def assert_complete_real_network_report(report, *, input_module=None):
    """Every section computed or skipped with its reason; the theory card skipped (not an
    nngauge MLP) with why; the budget's choices stated; the NLC table's layers named with their
    module types; the input module recorded when measuring from one."""
    sections = {s.key: s for s in report.sections}
    assert not report.failed, {k: sections[k].error for k in report.failed}
    assert report.status in ("ok", "warn", "bad")
    assert sections["theory"].status == "skipped" and sections["theory"].error
    assert report.settings.choices  # what the budget made of each section, in words
    table = sections["nlc"].output.tables[0]
    assert all("(" in row[0] for row in table.rows[:-1])  # layer names carry module types
    if input_module is not None:
        assert report.to_dict()["sections"]["nlc"]["result"]["mode"]["input_module"]
