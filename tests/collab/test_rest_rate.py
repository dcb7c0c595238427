"""The REST request rate per client address (``collab.http.rate_limit``): a burst, then the
average, a wait that says when; each address (an IPv6 /64) on its own; the map of addresses
bounded in bytes, forgetting refilled buckets first."""

from __future__ import annotations

from tether.collab.http.rate_limit import RequestRate


def test_a_burst_then_the_average_and_a_wait_that_says_when() -> None:
    rate = RequestRate(limit=100, window=5.0, burst=200)  # Tiptap Cloud's: 20 a second
    assert all(rate.wait("10.0.0.1", 0.0) == 0 for _ in range(200))
    assert rate.wait("10.0.0.1", 0.0) == 1  # one token is 50 ms away: at least a second
    assert rate.wait("10.0.0.1", 0.05) == 0  # and then it is there
    assert rate.wait("10.0.0.1", 0.05) == 1
    # Five seconds later the average holds: 100 more, not 200.
    assert sum(rate.wait("10.0.0.1", 5.05) == 0 for _ in range(150)) == 100


def test_the_wait_counts_how_long_the_bucket_takes_to_give_one_request() -> None:
    rate = RequestRate(limit=1, window=60.0)
    assert rate.wait("10.0.0.1", 0.0) == 0
    assert rate.wait("10.0.0.1", 0.0) == 60
    assert rate.wait("10.0.0.1", 45.0) == 15


def test_each_address_has_its_own_bucket_and_an_ipv6_host_its_64() -> None:
    rate = RequestRate(limit=2, window=10.0)
    for _ in range(2):
        assert rate.wait("10.0.0.1", 0.0) == 0
        assert rate.wait("2001:db8:1:2::1", 0.0) == 0
    assert rate.wait("10.0.0.1", 0.0) > 0
    assert rate.wait("2001:db8:1:2:ffff::9", 0.0) > 0  # same /64
    assert rate.wait("10.0.0.2", 0.0) == 0
    assert rate.wait("2001:db8:1:3::1", 0.0) == 0
    assert rate.wait("::ffff:10.0.0.3", 0.0) == 0 and rate.wait("10.0.0.3", 0.0) == 0
    assert rate.wait("10.0.0.3", 0.0) > 0  # an IPv4-mapped address is its IPv4 address


def test_no_limit_admits_everything_and_keeps_nothing() -> None:
    rate = RequestRate(limit=0, window=5.0)
    assert all(rate.wait(f"10.0.{i // 256}.{i % 256}", 0.0) == 0 for i in range(1000))
    assert len(rate) == 0


def test_the_map_of_addresses_stays_within_its_bytes_forgetting_refilled_buckets_first() -> None:
    rate = RequestRate(limit=10, window=1.0, max_bytes=64 * 1024)
    busy = "192.168.0.1"
    for _ in range(10):
        rate.wait(busy, 0.0)  # emptied: its state must outlive the crowd below
    for i in range(100_000):
        rate.wait(f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}", float(i) * 0.001)
        if i % 50 == 0:
            rate.wait(busy, float(i) * 0.001)  # 10 a second: it never refills
        assert rate.kept_bytes <= rate.max_bytes
    assert 0 < len(rate) < 400
    assert rate.wait(busy, 100.0) > 0  # still counted: the refilled ones went first
