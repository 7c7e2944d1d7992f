"""Concurrency permits: ensure_permits, take_permit, renew_permit, release_permit,
permit_holders."""

from __future__ import annotations

from mongosched.store import Store

from .helpers import LATER, sec

UNTIL = LATER + sec(30)


def test_ensure_permits_is_idempotent(store: Store) -> None:
    store.permits.ensure_permits("t", 2)
    store.permits.ensure_permits("t", 2)
    assert store.permits.take_permit("t", 2, "a", 1, "me", LATER, UNTIL)
    store.permits.ensure_permits("t", 2)  # does not free or add permits
    assert store.permits.take_permit("t", 2, "b", 2, "me", LATER, UNTIL)
    assert not store.permits.take_permit("t", 2, "c", 3, "me", LATER, UNTIL)
    assert store.permits.permit_holders("t", LATER) == 2


def test_take_up_to_the_limit(store: Store) -> None:
    assert store.permits.permit_holders("t", LATER) == 0
    assert not store.permits.take_permit("t", 1, "a", 1, "me", LATER, UNTIL)  # none made yet
    store.permits.ensure_permits("t", 3)
    assert store.permits.take_permit("t", 2, "a", 1, "me", LATER, UNTIL)
    assert store.permits.take_permit("t", 2, "b", 2, "other", LATER, UNTIL)
    assert not store.permits.take_permit("t", 2, "c", 3, "me", LATER, UNTIL)
    assert store.permits.permit_holders("t", LATER) == 2
    assert store.permits.take_permit("t", 3, "c", 3, "me", LATER, UNTIL)  # a higher limit
    assert not store.permits.take_permit("t", 3, "d", 4, "me", LATER, UNTIL)
    assert store.permits.permit_holders("t", LATER) == 3
    assert store.permits.permit_holders("other", LATER) == 0  # permits are per task
    assert not store.permits.take_permit("other", 1, "d", 4, "me", LATER, UNTIL)


def test_release_frees_a_permit(store: Store) -> None:
    store.permits.ensure_permits("t", 1)
    assert store.permits.take_permit("t", 1, "a", 1, "me", LATER, UNTIL)
    assert not store.permits.take_permit("t", 1, "b", 2, "me", LATER, UNTIL)
    store.permits.release_permit("t", "a")
    store.permits.release_permit("t", "a")  # repeated: nothing more to do
    store.permits.release_permit("t", "never-held")
    assert store.permits.permit_holders("t", LATER) == 0
    assert not store.permits.renew_permit("t", "a", UNTIL + sec(30))
    assert store.permits.take_permit("t", 1, "b", 2, "me", LATER, UNTIL)
    assert store.permits.permit_holders("t", LATER) == 1


def test_renew_and_take_over_an_expired_permit(store: Store) -> None:
    store.permits.ensure_permits("t", 2)
    assert store.permits.take_permit("t", 2, "a", 1, "me", LATER, UNTIL)
    assert store.permits.take_permit("t", 2, "b", 2, "me", LATER, UNTIL)
    assert store.permits.renew_permit("t", "a", UNTIL + sec(60))
    assert not store.permits.renew_permit("t", "nobody", UNTIL + sec(60))
    assert not store.permits.renew_permit("other", "a", UNTIL + sec(60))
    assert store.permits.permit_holders("t", UNTIL) == 2  # until is inclusive
    assert store.permits.permit_holders("t", UNTIL + sec(1)) == 1  # b's ran out
    assert not store.permits.take_permit("t", 2, "c", 3, "me", UNTIL, UNTIL + sec(30))
    assert store.permits.take_permit("t", 2, "c", 3, "me", UNTIL + sec(1), UNTIL + sec(31))  # b's
    assert not store.permits.renew_permit("t", "b", UNTIL + sec(60))  # taken over
    assert store.permits.permit_holders("t", UNTIL + sec(1)) == 2
    store.permits.release_permit("t", "b")  # the old holder's release frees nothing of c's
    assert store.permits.permit_holders("t", UNTIL + sec(1)) == 2
    assert store.permits.renew_permit("t", "c", UNTIL + sec(90))


def test_taking_a_permit_again_with_the_same_token_takes_no_second_one(store: Store) -> None:
    store.permits.ensure_permits("t", 2)
    assert store.permits.take_permit("t", 2, "a", 1, "me", LATER, UNTIL)
    assert store.permits.take_permit("t", 2, "a", 1, "me", LATER, UNTIL)  # repeated: already held
    assert store.permits.permit_holders("t", LATER) == 1
    assert store.permits.take_permit("t", 2, "b", 2, "me", LATER, UNTIL)
