"""Retry policy: pure, no database."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from mongosched import Fail, RetryPolicy
from mongosched.errors import ConfigurationError
from mongosched.retry import DEFAULT_RETRIES, DEFAULT_RETRY


def seconds(policy: RetryPolicy, attempts: range) -> list[float]:
    return [policy.delay_for(n).total_seconds() for n in attempts]


def test_fixed_linear_exponential_backoff() -> None:
    assert seconds(RetryPolicy(retries=4, backoff="fixed", delay=2), range(1, 5)) == [2, 2, 2, 2]
    assert seconds(RetryPolicy(retries=4, backoff="linear", delay=2), range(1, 5)) == [2, 4, 6, 8]
    assert seconds(RetryPolicy(retries=4, backoff="exponential", delay=2), range(1, 5)) == [
        2,
        4,
        8,
        16,
    ]


def test_cap_applies_and_huge_attempts_do_not_overflow() -> None:
    policy = RetryPolicy(
        retries=1999, backoff="exponential", delay=1, max_delay=timedelta(minutes=5)
    )
    assert seconds(policy, range(8, 11)) == [128, 256, 300]
    assert policy.delay_for(1500).total_seconds() == 300


def test_full_jitter_stays_within_zero_and_the_computed_delay() -> None:
    policy = RetryPolicy(retries=9, backoff="exponential", delay=1, max_delay=60, jitter=True)
    rng = random.Random(7)
    values = [policy.delay_for(6, rng).total_seconds() for _ in range(500)]
    assert all(0 <= v <= 32 for v in values)
    assert max(values) > 25 and min(values) < 5  # spread over the range, not a constant


def test_retry_on_filters_exceptions_and_fail_never_retries() -> None:
    policy = RetryPolicy(retries=2, retry_on=(IOError,))
    assert policy.should_retry(OSError("x"), 1)
    assert policy.should_retry(OSError("x"), 2)
    assert not policy.should_retry(ValueError("x"), 1)
    assert not policy.should_retry(OSError("x"), 3)  # the first attempt and 2 retries spent
    assert not RetryPolicy(retries=2).should_retry(Fail("stop"), 1)


def test_an_int_counts_retries_after_the_first_attempt_without_delay() -> None:
    policy = RetryPolicy.coerce(3, task="t")
    assert (policy.retries, policy.max_attempts) == (3, 4)
    assert policy.delay_for(1) == timedelta(0)
    assert RetryPolicy.coerce(0, task="t").max_attempts == 1  # no retry
    assert RetryPolicy.coerce(None) is DEFAULT_RETRY
    assert (DEFAULT_RETRY.retries, DEFAULT_RETRY.max_attempts) == (DEFAULT_RETRIES, 3)
    assert DEFAULT_RETRY.jitter


def test_a_policy_that_names_no_count_keeps_the_default_count() -> None:
    assert RetryPolicy(delay=5).retries == DEFAULT_RETRY.retries
    assert RetryPolicy(backoff="fixed").should_retry(OSError("x"), DEFAULT_RETRIES)
    assert not RetryPolicy(backoff="fixed").should_retry(OSError("x"), DEFAULT_RETRIES + 1)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"retries": -1}, "retries"),
        ({"retries": True}, "retries"),
        ({"retries": 1.5}, "retries"),
        ({"backoff": "fibonacci"}, "backoff"),
        ({"delay": -1}, "delay"),
        ({"delay": "1s"}, "delay"),
        ({"max_delay": -5}, "max_delay"),
        ({"retry_on": ("IOError",)}, "retry_on"),
    ],
)
def test_bad_policy_is_refused_naming_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigurationError, match=field):
        RetryPolicy(**kwargs)


def test_coerce_names_the_task() -> None:
    with pytest.raises(ConfigurationError, match="task 'emails.send'.*retry"):
        RetryPolicy.coerce("3", task="emails.send")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="task 'emails.send'.*retries"):
        RetryPolicy.coerce(-1, task="emails.send")
