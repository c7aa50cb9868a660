"""The batching mechanism itself: leaders, shared flushes, errors, cancellation."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from spade_memory.errors import StorageCorrupted, StorageError
from spade_memory.storage.batching import Batcher, Pending, ThreadBatcher


class Recorder:
    """A flush that doubles each item, records its batches and can be held or fail."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.hold: asyncio.Event | None = None
        self.started = asyncio.Event()
        self.fail: Exception | None = None

    async def __call__(self, batch: list[Pending[int, int]]) -> None:
        self.batches.append([p.item for p in batch])
        self.started.set()
        await asyncio.sleep(0)  # as a write handed to another thread would
        if self.hold is not None:
            await self.hold.wait()
        if self.fail is not None:
            raise self.fail
        for pending in batch:
            if pending.item < 0:
                pending.fail(ValueError(f"negative {pending.item}"))
            else:
                pending.resolve(pending.item * 2)


async def settle_none(batch: list[Pending[int, int]]) -> None:
    raise AssertionError("no leader was cancelled")


@pytest.mark.parametrize("uninterruptible", [True, False])
async def test_concurrent_items_share_flushes_and_each_gets_its_own_result(
    uninterruptible: bool,
) -> None:
    flush = Recorder()
    batcher: Batcher[int, int] = Batcher(flush, settle=None if uninterruptible else settle_none)
    results = await asyncio.gather(*(batcher.submit(i) for i in range(50)))
    assert results == [i * 2 for i in range(50)]
    assert 1 <= len(flush.batches) < 50
    assert sorted(i for batch in flush.batches for i in batch) == list(range(50))
    assert not batcher.queue and not batcher.gate.locked()


async def test_items_arriving_during_a_flush_wait_for_the_next_one() -> None:
    flush = Recorder()
    flush.hold = asyncio.Event()
    batcher: Batcher[int, int] = Batcher(flush, settle=settle_none)
    first = asyncio.create_task(batcher.submit(1))
    await flush.started.wait()
    later = [asyncio.create_task(batcher.submit(i)) for i in range(2, 6)]
    await asyncio.sleep(0)
    assert len(batcher.queue) == 4 and not first.done()
    flush.hold.set()
    assert await asyncio.gather(first, *later) == [2, 4, 6, 8, 10]
    assert flush.batches == [[1], [2, 3, 4, 5]]


async def test_a_failed_flush_fails_every_caller_of_its_batch_with_its_own_exception() -> None:
    flush = Recorder()
    flush.fail = StorageCorrupted("the disk is full", path=None)
    batcher: Batcher[int, int] = Batcher(flush)
    results = await asyncio.gather(*(batcher.submit(i) for i in range(5)), return_exceptions=True)
    assert len(flush.batches) == 1
    assert all(isinstance(r, StorageCorrupted) for r in results), results
    assert all(str(r) == "the disk is full" for r in results)
    assert len({id(r) for r in results}) == 5, "callers share one exception object"
    assert sum(r is flush.fail for r in results) == 1  # the leader's is the flush's own
    assert all(r.__cause__ is flush.fail for r in results if r is not flush.fail)
    flush.fail = None
    assert await batcher.submit(7) == 14  # usable after the failure


async def test_an_item_failure_fails_only_its_caller() -> None:
    batcher: Batcher[int, int] = Batcher(Recorder())
    results = await asyncio.gather(*(batcher.submit(i) for i in (1, -2, 3)), return_exceptions=True)
    assert results[0] == 2 and results[2] == 6
    assert isinstance(results[1], ValueError)


async def test_a_flush_that_settles_nothing_fails_its_callers() -> None:
    async def forgetful(batch: list[Pending[int, int]]) -> None:
        return None

    batcher: Batcher[int, int] = Batcher(forgetful)
    with pytest.raises(StorageError, match="without an outcome"):
        await batcher.submit(1)


@pytest.mark.parametrize("uninterruptible", [True, False])
async def test_a_caller_cancelled_while_queued_is_never_flushed(uninterruptible: bool) -> None:
    flush = Recorder()
    flush.hold = asyncio.Event()
    batcher: Batcher[int, int] = Batcher(flush, settle=None if uninterruptible else settle_none)
    first = asyncio.create_task(batcher.submit(1))
    await flush.started.wait()
    given_up = asyncio.create_task(batcher.submit(2))
    kept = asyncio.create_task(batcher.submit(3))
    await asyncio.sleep(0)
    given_up.cancel()
    with pytest.raises(asyncio.CancelledError):
        await given_up
    assert [p.item for p in batcher.queue] == [3]
    flush.hold.set()
    assert await asyncio.gather(first, kept) == [2, 6]
    assert flush.batches == [[1], [3]]


async def test_a_cancelled_leader_of_an_uninterruptible_flush_leaves_it_to_finish() -> None:
    flush = Recorder()
    flush.hold = asyncio.Event()
    gate = asyncio.Event()
    batcher: Batcher[int, int] = Batcher(flush)
    await batcher.gate.acquire()  # a batch forms while the gate is held
    leader = asyncio.create_task(batcher.submit(1))
    other = asyncio.create_task(batcher.submit(2))
    await asyncio.sleep(0)
    batcher.gate.release()
    await flush.started.wait()
    leader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader
    assert batcher.gate.locked()  # the flush still holds it
    third = asyncio.create_task(batcher.submit(3))
    await asyncio.sleep(0)
    gate.set()
    flush.hold.set()
    assert await other == 4
    assert await third == 6
    assert flush.batches == [[1, 2], [3]]  # the leader's item was flushed all the same
    await batcher.drain()


async def test_a_cancelled_leader_of_an_interruptible_flush_has_the_others_settled() -> None:
    flush = Recorder()
    flush.hold = asyncio.Event()
    settled: list[list[int]] = []

    async def settle(batch: list[Pending[int, int]]) -> None:
        settled.append([p.item for p in batch])
        for pending in batch:
            pending.resolve(-pending.item)

    batcher: Batcher[int, int] = Batcher(flush, settle=settle)
    await batcher.gate.acquire()
    leader = asyncio.create_task(batcher.submit(1))
    others = [asyncio.create_task(batcher.submit(i)) for i in (2, 3)]
    await asyncio.sleep(0)
    batcher.gate.release()
    await flush.started.wait()
    leader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader
    assert not batcher.gate.locked()  # the interrupted flush let go of it
    assert await asyncio.gather(*others) == [-2, -3]
    await batcher.wait_background()
    assert settled == [[2, 3]]


async def test_a_settlement_that_fails_fails_the_others() -> None:
    flush = Recorder()
    flush.hold = asyncio.Event()

    async def settle(batch: list[Pending[int, int]]) -> None:
        raise StorageError("could not find out")

    batcher: Batcher[int, int] = Batcher(flush, settle=settle)
    await batcher.gate.acquire()
    leader = asyncio.create_task(batcher.submit(1))
    other = asyncio.create_task(batcher.submit(2))
    await asyncio.sleep(0)
    batcher.gate.release()
    await flush.started.wait()
    leader.cancel()
    with pytest.raises(StorageError, match="could not find out"):
        await other
    with pytest.raises(asyncio.CancelledError):
        await leader


async def test_drain_waits_for_queued_items() -> None:
    flush = Recorder()
    flush.hold = asyncio.Event()
    batcher: Batcher[int, int] = Batcher(flush)
    tasks = [asyncio.create_task(batcher.submit(i)) for i in range(3)]
    await flush.started.wait()
    more = asyncio.create_task(batcher.submit(9))
    draining = asyncio.create_task(batcher.drain())
    await asyncio.sleep(0.01)
    assert not draining.done()
    flush.hold.set()
    await draining
    assert flush.batches == [[0, 1, 2], [9]]  # both flushed, nothing left waiting
    assert not batcher.queue and not batcher.gate.locked()
    assert await asyncio.gather(*tasks, more) == [0, 2, 4, 18]


def test_threads_share_flushes_and_each_gets_its_result() -> None:
    batches: list[list[int]] = []
    entered = threading.Event()

    def flush(batch: list[Pending[int, int]]) -> None:
        batches.append([p.item for p in batch])
        if len(batches) == 1:
            entered.set()
            deadline = time.monotonic() + 30
            while len(batcher.queue) < 7 and time.monotonic() < deadline:
                time.sleep(0.001)
        for pending in batch:
            pending.resolve(pending.item + 100)

    batcher: ThreadBatcher[int, int] = ThreadBatcher(flush, what="add numbers")
    results: dict[int, int] = {}

    def call(item: int) -> None:
        results[item] = batcher.submit(item)

    first = threading.Thread(target=call, args=(0,))
    first.start()
    assert entered.wait(30)
    rest = [threading.Thread(target=call, args=(i,)) for i in range(1, 8)]
    for thread in rest:
        thread.start()
    for thread in [first, *rest]:
        thread.join(30)
    assert results == {i: i + 100 for i in range(8)}
    assert batches[0] == [0] and sorted(batches[1]) == list(range(1, 8))


def test_a_failed_thread_flush_fails_every_caller_with_its_own_exception() -> None:
    def flush(batch: list[Pending[int, int]]) -> None:
        time.sleep(0.05)  # let the others queue
        raise StorageError("no space left")

    batcher: ThreadBatcher[int, int] = ThreadBatcher(flush, what="add numbers")
    errors: list[BaseException] = []
    lock = threading.Lock()

    def call(item: int) -> None:
        try:
            batcher.submit(item)
        except StorageError as exc:
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(errors) == 6 and all(str(e) == "no space left" for e in errors)
    assert len({id(e) for e in errors}) == 6


def test_an_interrupted_thread_leader_fails_the_others() -> None:
    class Interrupt(BaseException):
        pass

    taken: list[Pending[int, int]] = []

    def flush(batch: list[Pending[int, int]]) -> None:
        taken.extend(batch)
        raise Interrupt

    batcher: ThreadBatcher[int, int] = ThreadBatcher(flush, what="add numbers")
    # A batch of two, the leader interrupted: the other is failed, not left waiting.
    batcher.queue.append(Pending(5))
    with pytest.raises(Interrupt):
        batcher.submit(1)
    (other,) = [p for p in taken if p.item == 5]
    with pytest.raises(StorageError, match="could not add numbers: interrupted"):
        other.outcome()
