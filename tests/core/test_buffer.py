"""The writer's buffer: batches cut from runs of entries, under count and byte limits."""

from __future__ import annotations

import random

from asyncsink.writer._buffer import RequestBuffer, Run


def fresh_run(first: int, sizes: list[int]) -> Run[str]:
    entries = [f"e{first + i}" for i in range(len(sizes))]
    return Run(range(first, first + len(sizes)), entries, sizes, sum(sizes))


def drain(buffer: RequestBuffer[str], max_count: int, max_bytes: int) -> list[list[int]]:
    batches = []
    while buffer:
        run, call = buffer.take(max_count, max_bytes, now=0.0)
        assert run is not None and call is None
        assert run.size == sum(run.sizes)
        assert run.entries == [f"e{seq}" for seq in run.seqs]
        batches.append(list(run.seqs))
    return batches


def test_a_whole_run_leaves_as_one_batch_without_copying() -> None:
    buffer: RequestBuffer[str] = RequestBuffer()
    run = fresh_run(0, [10] * 5)
    buffer.extend(run, now=1.0)
    taken, _ = buffer.take(5, 1000, now=1.0)
    assert taken is not None
    assert taken.entries is run.entries and taken.seqs == range(0, 5)
    assert len(buffer) == 0 and buffer.bytes == 0 and buffer.fresh_count == 0


def test_batches_are_cut_by_count_and_bytes_across_runs() -> None:
    buffer: RequestBuffer[str] = RequestBuffer()
    buffer.extend(fresh_run(0, [10, 20, 30, 40]), now=0.0)
    buffer.extend(fresh_run(4, [5, 5, 100]), now=0.0)
    assert drain(buffer, max_count=3, max_bytes=60) == [[0, 1, 2], [3, 4, 5], [6]]
    assert buffer.bytes == 0 and buffer.fresh_bytes == 0


def test_an_entry_over_the_byte_limit_leaves_alone() -> None:
    buffer: RequestBuffer[str] = RequestBuffer()
    buffer.extend(fresh_run(0, [10, 500, 10]), now=0.0)
    assert drain(buffer, max_count=10, max_bytes=100) == [[0], [1], [2]]


def test_cutting_matches_one_entry_at_a_time_filling() -> None:
    """Against the plain rule: fill a batch entry by entry while it fits (at least one)."""
    rng = random.Random(7)
    for _ in range(200):
        buffer: RequestBuffer[str] = RequestBuffer()
        sizes: list[int] = []
        for _ in range(rng.randint(1, 6)):
            run_sizes = [rng.randint(1, 50) for _ in range(rng.randint(1, 30))]
            if rng.random() < 0.5:
                buffer.extend(fresh_run(len(sizes), run_sizes), now=0.0)
            else:
                for offset, size in enumerate(run_sizes):
                    buffer.append(len(sizes) + offset, f"e{len(sizes) + offset}", size, now=0.0)
            sizes.extend(run_sizes)
        max_count, max_bytes = rng.randint(1, 40), rng.randint(1, 200)
        expected, seq = [], 0
        while seq < len(sizes):
            batch, total = [seq], sizes[seq]
            seq += 1
            while seq < len(sizes) and len(batch) < max_count and total + sizes[seq] <= max_bytes:
                batch.append(seq)
                total += sizes[seq]
                seq += 1
            expected.append(batch)
        assert drain(buffer, max_count, max_bytes) == expected


def test_retry_groups_go_first_and_a_pinned_group_leaves_whole() -> None:
    buffer: RequestBuffer[str] = RequestBuffer()
    buffer.extend(fresh_run(10, [1] * 3), now=0.0)
    buffer.requeue(fresh_run(0, [1] * 2), not_before=5.0)
    buffer.requeue(fresh_run(4, [1] * 4), not_before=1.0, call="call-1")
    assert buffer.next_retry() == 1.0
    run, call = buffer.take(2, 100, now=0.5)  # no group is ready yet: fresh entries
    assert run is not None and list(run.seqs) == [10, 11] and call is None
    run, call = buffer.take(2, 100, now=2.0)  # the pinned group, whole, over the count
    assert run is not None and list(run.seqs) == [4, 5, 6, 7] and call == "call-1"
    run, call = buffer.take(10, 100, now=6.0)  # a group that is not pinned, then fresh
    assert run is not None and list(run.seqs) == [0, 1, 12] and call is None
    assert run.entries == ["e0", "e1", "e12"] and run.size == 3
    assert buffer.take(10, 100, now=6.0) == (None, None)


def test_fresh_entries_wait_when_not_asked_for() -> None:
    buffer: RequestBuffer[str] = RequestBuffer()
    buffer.extend(fresh_run(0, [1] * 3), now=0.0)
    assert buffer.take(10, 100, now=0.0, include_fresh=False) == (None, None)
    assert buffer.oldest_fresh() == 0.0


def test_appended_entries_join_the_last_run_until_it_is_cut() -> None:
    buffer: RequestBuffer[str] = RequestBuffer()
    for seq in range(4):
        buffer.append(seq, f"e{seq}", 1, now=float(seq))
    assert buffer.oldest_fresh() == 0.0  # the run's first entry sets the deadline
    run, _ = buffer.take(3, 100, now=4.0)
    assert run is not None and list(run.seqs) == [0, 1, 2]
    buffer.append(4, "e4", 1, now=5.0)  # a new run: the cut one's lists stay as they are
    assert drain(buffer, 10, 100) == [[3, 4]]


def test_appending_never_grows_a_run_the_caller_gave() -> None:
    buffer: RequestBuffer[str] = RequestBuffer()
    given = fresh_run(0, [1, 1])
    buffer.extend(given, now=0.0)
    buffer.append(2, "e2", 1, now=0.0)
    assert given.entries == ["e0", "e1"]
    assert list(buffer) == [(0, "e0"), (1, "e1"), (2, "e2")]


def test_iteration_lists_what_is_left_front_to_back() -> None:
    buffer: RequestBuffer[str] = RequestBuffer()
    buffer.extend(fresh_run(2, [1] * 4), now=0.0)
    buffer.take(2, 100, now=0.0)
    buffer.requeue(Run.of([(0, "e0", 1), (1, "e1", 1)]), not_before=9.0)
    assert list(buffer) == [(0, "e0"), (1, "e1"), (4, "e4"), (5, "e5")]
    assert len(buffer) == 4 and buffer.bytes == 4 and buffer.fresh_count == 2
