"""Per-domain counts shared by InterPodAffinity and PodTopologySpread."""

from nodeagent.scheduler.framework.topology import PairCounts, bump, count_at, sum_at


def test_counts_follow_the_nodes_domain_and_drop_zeroes():
    counts: PairCounts = {}
    z1, z2, bare = {"zone": "a", "host": "n1"}, {"zone": "b", "host": "n2"}, {"host": "n3"}
    bump(counts, "zone", z1)
    bump(counts, "zone", z1, 2)
    bump(counts, "zone", z2)
    bump(counts, "zone", bare, 5)  # no zone label: in no domain
    assert counts == {("zone", "a"): 3, ("zone", "b"): 1}
    assert count_at(counts, "zone", z1) == 3 and count_at(counts, "zone", bare) == 0
    bump(counts, "zone", z2, -1)
    assert ("zone", "b") not in counts  # zero dropped: an empty dict means no occupied domain
    bump(counts, "host", z1, 4)
    assert sum_at(counts, ["zone", "host"], z1) == 7 and sum_at(counts, ["zone", "host"], bare) == 0
