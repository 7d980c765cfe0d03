"""The ``ip -batch`` lines that make a fabric's veths (``net/veths.py``)."""
from __future__ import annotations

from types import SimpleNamespace

from emulator.net.veths import batch_lines


def _link(name1, addr1, node1, name2, addr2, node2):
    return SimpleNamespace(pair=(name1, addr1, node1, name2, addr2, node2))


HOST = SimpleNamespace(pid=4101, inNamespace=True)
LEAF = SimpleNamespace(pid=4102, inNamespace=False)
SPINE = SimpleNamespace(pid=4103, inNamespace=False)


def test_each_end_is_made_in_its_nodes_namespace_with_its_mac():
    lines = batch_lines([_link("h1-eth0", "02:00:0a:00:01:01", HOST,
                               "leaf1-eth1", "aa:00:00:00:00:01", LEAF)])
    assert lines[0] == ("link add name h1-eth0 address 02:00:0a:00:01:01 netns 4101 type veth "
                        "peer name leaf1-eth1 address aa:00:00:00:00:01 netns 4102")


def test_after_all_pairs_only_the_ends_outside_a_namespace_are_brought_up():
    lines = batch_lines([_link("h1-eth0", None, HOST, "leaf1-eth1", None, LEAF),
                         _link("leaf1-eth3", None, LEAF, "spine1-eth1", None, SPINE)])
    assert [line.split()[0:2] for line in lines[:2]] == [["link", "add"]] * 2
    # a namespace's end is its node's to bring up (with its addresses)
    assert lines[2:] == ["link set dev leaf1-eth1 up", "link set dev leaf1-eth3 up",
                         "link set dev spine1-eth1 up"]


def test_an_mtu_is_given_to_both_ends():
    (add, _up) = batch_lines([_link("h1-eth0", None, HOST, "leaf1-eth1", None, LEAF)], 9000)
    assert add.count(" mtu 9000 ") == 2
    (add, _up) = batch_lines([_link("h1-eth0", None, HOST, "leaf1-eth1", None, LEAF)])
    assert "mtu" not in add
