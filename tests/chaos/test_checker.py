"""The chaos run's checker finds each anomaly in a made-up history, and nothing in a clean one."""

from __future__ import annotations

from deploy.chaos.checker import Ack, History, Read, check


def clean() -> History:
    values = [b"v0", b"v1", b"v2", b"v3"]
    return History(
        acks=[Ack(0, i, v, i) for i, v in enumerate(values)],
        sent=set(values) | {b"t0"},
        aborted={b"t0"},
        reads=[Read("c1", 1, 0, 0, b"v0"), Read("c1", 1, 0, 1, b"v1"),
               Read("c2", 2, 0, 1, b"v1"),  # a new assignment may start again from the committed offset
               Read("c2", 2, 0, 3, b"v3")],  # offset 2 is the aborted t0: not a skip
        log={0: [(0, b"v0"), (1, b"v1"), (2, b"t0"), (3, b"v3"), (4, b"v2")]},
    )


def test_a_clean_history_has_no_anomaly() -> None:
    history = clean()
    history.log = {0: [(0, b"v0"), (1, b"v1"), (2, b"t0"), (3, b"v2"), (4, b"v3")]}
    history.reads[-1] = Read("c2", 2, 0, 3, b"v2")
    found = check(history)
    assert found.ok, found.counts()


def test_each_anomaly_is_found() -> None:
    history = clean()  # its log already has v3 before v2: reordered
    history.log[0].append((5, b"v1"))  # twice
    history.acks.append(Ack(0, 6, b"v4", 4))  # acknowledged, never stored
    history.reads += [Read("c1", 1, 0, 1, b"v1"),  # backwards in one assignment
                      Read("c1", 1, 0, 5, b"v1"),  # jumps over 3 and 4 (2 is aborted)
                      Read("c3", 1, 0, 2, b"t0"),  # an aborted transaction's record
                      Read("c3", 1, 0, 9, b"never-sent")]
    counts = check(history).counts()
    assert counts == {"lost": 1, "duplicated": 1, "reordered": 1, "nonmonotonic": 1, "skipped": 2,
                      "aborted_read": 1, "phantom_read": 1}, counts


def test_a_record_in_doubt_is_not_lost_and_a_partition_of_its_own_orders_alone() -> None:
    history = History(acks=[Ack(0, 0, b"a", 0), Ack(1, 0, b"b", 1), Ack(0, 1, b"c", 2)],
                      sent={b"a", b"b", b"c", b"d"}, in_doubt={b"d"},
                      log={0: [(0, b"a"), (1, b"c")], 1: [(0, b"b")]})
    assert check(history).ok


def test_a_transaction_aborted_without_the_producer_knowing_is_neither_skipped_nor_readable() -> None:
    """The producer's commit timed out (in doubt) and the coordinator aborted it: its record is in the log, outside
    what read_committed shows; a consumer that stepped over it skipped nothing, one that read it read aborted data."""
    history = History(acks=[Ack(0, 0, b"a", 0), Ack(0, 2, b"c", 2)], sent={b"a", b"b", b"c"}, in_doubt={b"b"},
                      log={0: [(0, b"a"), (1, b"b"), (2, b"c")]}, committed={0: {0, 2}},
                      reads=[Read("c1", 1, 0, 0, b"a"), Read("c1", 1, 0, 2, b"c")])
    assert check(history).ok
    history.reads.append(Read("c2", 1, 0, 1, b"b"))
    assert check(history).counts()["aborted_read"] == 1
