"""``fabric-emu run``'s exit message names what failed: plain flows, tenant
isolation or the collectives (not "some flows" when there are none)."""
from __future__ import annotations

from emulator.cli import what_failed


def test_collectives_failure_is_named():
    s = {"flows": [], "collectives": {"complete": False, "results": [], "training": None,
                                      "errors": ["server1: collective engine timed out"]}}
    assert what_failed(s) == ["collectives failed: server1: collective engine timed out"]
    s["collectives"].update(errors=[], results=[{"wrong": 3}, {"wrong": 0}],
                            training={"wrong": 2})
    assert what_failed(s) == ["collectives failed: 5 wrong elements (#wrong)"]


def test_flows_and_isolation():
    flows = [{"complete": False}, {"complete": True}, {"complete": False, "as_expected": True}]
    assert what_failed({"flows": flows}) == ["1 of 3 flows did not complete"]
    assert what_failed({"flows": [], "isolation": {"isolated": False}}) == \
        ["tenants were not isolated"]
    assert what_failed({"flows": [{"complete": True}]}) == ["the run did not complete"]


def test_failed_flows_name_their_work_completion_status():
    flows = [{"complete": False, "failed": True, "status": "RETRY_EXC_ERR"},
             {"complete": False, "failed": False, "status": None},
             {"complete": False, "failed": True, "status": "RETRY_EXC_ERR"}]
    assert what_failed({"flows": flows}) == \
        ["3 of 3 flows did not complete (2 failed: RETRY_EXC_ERR)"]
