"""The fencing state machines of :mod:`storage.tiering.holding`: when a waiting pipeline may
take the transactional id over, whether a task's holder still holds it, and how long the
holder may act on what Kafka does not fence."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from protocol.errors import KafkaError
from storage.kafka_client.transactions import TransactionDescription
from storage.tiering.holding import Free, Held, HoldClock, HolderWatch, holds

TIMEOUT = 60.0
STATES = (
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "Dead",
    "PrepareEpochFence",
)


def answer(state: str, producer_id: int = 7, epoch: int = 3) -> TransactionDescription:
    return TransactionDescription(
        error=KafkaError.NONE,
        state=state,
        producer_id=producer_id,
        epoch=epoch,
        timeout_ms=int(TIMEOUT * 1000),
        start_ms=-1,
    )


NOT_FOUND = TransactionDescription(
    error=KafkaError.TRANSACTIONAL_ID_NOT_FOUND,
    state="",
    producer_id=0,
    epoch=0,
    timeout_ms=0,
    start_ms=-1,
)


def test_a_transactional_id_nobody_used_or_released_is_free_at_once() -> None:
    for released in (NOT_FOUND, answer("CompleteAbort"), answer("Dead")):
        assert isinstance(HolderWatch(TIMEOUT).observe(released, 0.0), Free)


def test_an_open_transaction_is_a_holder_reported_once() -> None:
    watch = HolderWatch(TIMEOUT)
    first = watch.observe(answer("Ongoing"), 0.0)
    assert first == Held(producer_id=7, epoch=3, since=0.0, new=True)
    again = watch.observe(answer("Ongoing"), 500.0)
    assert again == Held(producer_id=7, epoch=3, since=0.0, new=False)
    other = watch.observe(answer("Ongoing", epoch=4), 501.0)
    assert other == Held(producer_id=7, epoch=4, since=501.0, new=True)


def test_a_holder_that_left_no_transaction_open_for_a_whole_timeout_is_gone() -> None:
    watch = HolderWatch(TIMEOUT)
    assert isinstance(watch.observe(answer("CompleteCommit"), 0.0), Held)
    assert isinstance(watch.observe(answer("CompleteCommit"), TIMEOUT - 1), Held)
    assert isinstance(watch.observe(answer("CompleteCommit"), TIMEOUT), Free)


def test_a_transaction_opened_in_between_restarts_the_wait() -> None:
    watch = HolderWatch(TIMEOUT)
    watch.observe(answer("CompleteCommit"), 0.0)
    watch.observe(answer("Ongoing"), 30.0)
    assert isinstance(watch.observe(answer("CompleteCommit"), 31.0), Held)
    assert isinstance(watch.observe(answer("CompleteCommit"), 31.0 + TIMEOUT - 1), Held)
    assert isinstance(watch.observe(answer("Empty"), 31.0 + TIMEOUT), Held)  # another state


@st.composite
def live_holder(draw: st.DrawFn) -> list[tuple[float, TransactionDescription]]:
    """What a live holder shows: between any two transactions of its, less than a timeout
    passes (it commits and reopens at once); epochs only grow (it may be re-initialised)."""
    observations: list[tuple[float, TransactionDescription]] = []
    now = 0.0
    epoch = draw(st.integers(0, 5))
    last_open = 0.0
    for _ in range(draw(st.integers(1, 60))):
        now += draw(st.floats(0.0, TIMEOUT / 2))
        if draw(st.booleans()):
            epoch += draw(st.integers(0, 1))
        state = draw(st.sampled_from(("Ongoing", "PrepareCommit", "CompleteCommit", "Empty")))
        if state in ("Ongoing", "PrepareCommit") or now - last_open >= TIMEOUT * 0.99:
            state, last_open = "Ongoing", now
        observations.append((now, answer(state, epoch=epoch)))
    return observations


@given(live_holder())
def test_a_live_holder_is_never_taken_over(
    observations: list[tuple[float, TransactionDescription]],
) -> None:
    watch = HolderWatch(TIMEOUT)
    for now, observed in observations:
        assert isinstance(watch.observe(observed, now), Held)


@given(
    st.lists(st.sampled_from(STATES), min_size=0, max_size=10),
    st.sampled_from(("Empty", "CompleteCommit")),
    st.floats(0.1, TIMEOUT / 4),
)
def test_a_holder_that_stopped_between_transactions_is_taken_over_within_a_timeout(
    before: list[str], last: str, poll: float
) -> None:
    watch = HolderWatch(TIMEOUT)
    now = 0.0
    for state in before:
        if isinstance(watch.observe(answer(state), now), Free):
            return  # released or aborted on timeout: free already
        now += poll
    stopped = now
    while not isinstance(watch.observe(answer(last, epoch=9), now), Free):
        now += poll
        assert now <= stopped + TIMEOUT + poll


@given(st.sampled_from(STATES), st.integers(0, 3), st.integers(0, 3))
def test_a_task_announces_only_under_its_holders_epoch(state: str, epoch: int, seen: int) -> None:
    held = holds(answer(state, epoch=seen), 7, epoch)
    aborted = state in ("PrepareAbort", "CompleteAbort", "Dead", "PrepareEpochFence")
    assert held == (epoch == seen and not aborted)
    assert not holds(NOT_FOUND, 7, epoch)


def test_the_holder_acts_until_its_timeout_less_a_safety_share_and_renews_at_a_third() -> None:
    clock = HoldClock(TIMEOUT)
    assert not clock.held(0.0)
    clock.opened(100.0)
    assert clock.held(100.0 + TIMEOUT - 5.0 - 0.001)
    assert not clock.held(100.0 + TIMEOUT - 5.0)
    assert not clock.renewal_due(100.0 + TIMEOUT / 3 - 0.001)
    assert clock.renewal_due(100.0 + TIMEOUT / 3)
    clock.committed(130.0)
    assert clock.held(130.0 + TIMEOUT - 5.1)
    clock.lost()
    assert not clock.held(131.0)
    assert clock.until() == float("-inf")


@given(st.lists(st.tuples(st.booleans(), st.floats(0.0, 1e6)), min_size=1), st.floats(0.0, 2e6))
def test_the_holder_never_acts_past_a_timeout_after_its_last_open_or_commit(
    events: list[tuple[bool, float]], now: float
) -> None:
    """Kafka aborts an open transaction no earlier than a timeout after it was opened, and
    a waiting pipeline takes over no earlier than a timeout after a commit: the holder's own
    bound is never later than that."""
    clock = HoldClock(TIMEOUT)
    for committed, sent in events:
        (clock.committed if committed else clock.opened)(sent)
    latest = max(sent for _, sent in events)
    if clock.held(now):
        assert now < latest + TIMEOUT
