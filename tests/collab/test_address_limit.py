"""Open sockets per client: an IPv4 address is one client, an IPv6 /64 is one client (a host
is usually given a whole /64), an IPv4-mapped IPv6 address is its IPv4 address."""

from __future__ import annotations

from tether.collab.transport.address_limit import ConnectionsPerAddress, address_group


def test_ipv6_addresses_of_one_64_count_as_one_client():
    limit = ConnectionsPerAddress(2)
    assert limit.enter("2001:db8:1:2::1") and limit.enter("2001:db8:1:2:ffff::9")
    assert not limit.enter("2001:db8:1:2:abcd::1")  # a third address of the same /64
    assert limit.enter("2001:db8:1:3::1")  # the next /64 is another client
    limit.leave("2001:db8:1:2::1")
    assert limit.open_from("2001:db8:1:2::7") == 1


def test_groups_keep_ipv4_and_names_as_they_are():
    assert address_group("203.0.113.9") == "203.0.113.9"
    assert address_group("unknown") == "unknown"
    assert address_group("::ffff:203.0.113.9") == "203.0.113.9"
    assert address_group("fe80::1%eth0") == "fe80::/64"
    assert address_group("not:an:address:at:all:z") == "not:an:address:at:all:z"
