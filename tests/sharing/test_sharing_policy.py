"""Sharing policy and configuration: allow-lists, private categories, the rate limit."""

from __future__ import annotations

import dataclasses

import pytest

from spade_memory.config import DEFAULT_CATEGORIES, MemoryConfig, SharingConfig
from spade_memory.errors import ConfigError
from spade_memory.spade.sharing.policy import RateLimiter, SharingPolicy

CATEGORIES = (*DEFAULT_CATEGORIES, "private")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_default_shares_nothing_with_anyone() -> None:
    policy = SharingPolicy(SharingConfig(), CATEGORIES)
    assert policy.visible_categories("bob@localhost") == ()
    assert not policy.may_query("bob@localhost")
    assert not policy.accepts_from("bob@localhost")


def test_allow_lists_are_per_category_and_normalised() -> None:
    config = SharingConfig(
        allow={"fact": ["Bob@LocalHost/phone"], "pattern": ["*"]},
        accept_from=frozenset({"Alice@localhost"}),
    )
    policy = SharingPolicy(config, CATEGORIES)
    assert policy.visible_categories("bob@localhost") == ("fact", "pattern")
    assert policy.visible_categories("eve@localhost") == ("pattern",)
    assert policy.may_see("bob@localhost", "fact")
    assert not policy.may_see("eve@localhost", "fact")
    assert policy.accepts_from("alice@localhost")
    assert not policy.accepts_from("bob@localhost")
    assert SharingPolicy(SharingConfig(accept_from=frozenset({"*"})), CATEGORIES).accepts_from(
        "anyone@example.org"
    )


def test_private_categories_cannot_be_allowed() -> None:
    for private in (frozenset({"private"}), frozenset({"fact"})):
        with pytest.raises(ConfigError, match="private categories"):
            SharingConfig(allow={next(iter(private)): ["*"]}, private_categories=private)
    config = SharingConfig(allow={"fact": ["*"]}, private_categories=frozenset({"pattern"}))
    assert SharingPolicy(config, CATEGORIES).visible_categories("x@y") == ("fact",)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"allow": {"fact": "bob@localhost"}}, "must be a list of JIDs"),
        ({"allow": {"fact": ["not a jid"]}}, "bare JIDs"),
        ({"accept_from": "bob@localhost"}, "not one string"),
        ({"rate_per_minute": 0}, "rate_per_minute"),
        ({"burst": 0}, "burst"),
        ({"max_results": 0}, "max_results"),
        ({"max_content_chars": 5}, "max_content_chars"),
        ({"max_answer_bytes": 100}, "max_answer_bytes"),
        ({"ask_timeout_seconds": -1}, "ask_timeout_seconds"),
    ],
)
def test_bad_sharing_config_is_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SharingConfig(**kwargs)  # type: ignore[arg-type]


def test_memory_config_checks_the_allowed_categories_exist() -> None:
    with pytest.raises(ConfigError, match="not among the memory's categories"):
        MemoryConfig(in_memory=True, sharing=SharingConfig(allow={"gossip": ["*"]}))
    with pytest.raises(ConfigError, match="sharing must be a SharingConfig"):
        MemoryConfig(in_memory=True, sharing={"fact": ["*"]})  # type: ignore[arg-type]
    config = MemoryConfig(in_memory=True, sharing=SharingConfig(allow={"fact": ["*"]}))
    assert config.sharing is not None and config.sharing.allow["fact"] == frozenset({"*"})
    assert MemoryConfig(in_memory=True).sharing is None
    copy = dataclasses.replace(config)
    assert copy == config
    hash(config)  # configs stay hashable


def test_rate_limiter_refills_and_reports_the_wait() -> None:
    clock = Clock()
    limiter = RateLimiter(rate_per_minute=6, burst=2, clock=clock)
    assert limiter.take("a") == 0.0
    assert limiter.take("a") == 0.0
    assert limiter.take("a") == pytest.approx(10.0)
    assert limiter.take("b") == 0.0  # its own bucket
    clock.now = 5.0
    assert limiter.take("a") == pytest.approx(5.0)
    clock.now = 10.0
    assert limiter.take("a") == 0.0
    clock.now = 1_000.0
    assert [limiter.take("a") for _ in range(3)][:2] == [0.0, 0.0]  # full again, no more


def test_rate_limiter_forgets_the_least_recent_senders() -> None:
    clock = Clock()
    limiter = RateLimiter(rate_per_minute=1, burst=1, clock=clock, max_senders=2)
    assert limiter.take("a") == 0.0
    assert limiter.take("b") == 0.0
    assert limiter.take("c") == 0.0
    assert limiter.take("a") == 0.0  # "a" was dropped, so it starts afresh
    assert limiter.take("c") > 0.0
    with pytest.raises(ValueError):
        RateLimiter(rate_per_minute=0, burst=1)
