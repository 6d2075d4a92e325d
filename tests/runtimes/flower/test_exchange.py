"""Messages in flight: replies go to their handlers; waiting stops when done or late."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import pytest
from flower_local import set_task_identity
from flwr.app import Message, RecordDict

from thinwire.runtimes.flower.exchange import Exchange


class ScriptedGrid:
    """Answers message i after `delays[i]` pulls; refuses the messages listed in `refuse`."""

    def __init__(self, delays: list[int], refuse: frozenset[int] = frozenset()) -> None:
        self.delays = delays
        self.refuse = refuse
        self.pulls = 0
        self.pushed = 0
        self.pulled_ids: list[list[str]] = []
        self._due: dict[str, tuple[int, Message]] = {}

    def push_messages(self, messages: Iterable[Message]) -> list[str | None]:
        ids: list[str | None] = []
        for message in messages:
            index, self.pushed = self.pushed, self.pushed + 1
            if index in self.refuse:
                ids.append(None)
                continue
            message_id = f"m{index}"
            message.metadata.__dict__["_message_id"] = message_id
            reply = Message(RecordDict(), reply_to=message)
            self._due[message_id] = (self.delays[index], reply)
            ids.append(message_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        self.pulls += 1
        ids = list(message_ids)
        self.pulled_ids.append(ids)
        return [self._due[i][1] for i in ids if self._due[i][0] < self.pulls]


@pytest.fixture(autouse=True)
def task_identity() -> None:
    set_task_identity()


def messages(count: int) -> list[Message]:
    return [Message(RecordDict(), 100 + i, "train") for i in range(count)]


def test_replies_go_to_the_handler_of_their_message() -> None:
    grid = ScriptedGrid([0, 2])
    exchange = Exchange(grid, poll_interval_s=0.001)  # type: ignore[arg-type]
    got: list[str] = []
    ids = exchange.push(messages(2), lambda reply: got.append(reply.metadata.reply_to_message_id))
    assert exchange.wait(lambda: len(got) == 2, deadline=time.monotonic() + 5)
    assert got == ids == ["m0", "m1"]
    assert exchange.in_flight == 0
    assert grid.pulled_ids[-1] == ["m1"]  # an answered message is never pulled again


def test_waiting_stops_at_the_deadline() -> None:
    grid = ScriptedGrid([10**9])
    exchange = Exchange(grid, poll_interval_s=0.001)  # type: ignore[arg-type]
    exchange.push(messages(1), lambda reply: None)
    assert not exchange.wait(lambda: False, deadline=time.monotonic() + 0.02)
    assert exchange.in_flight == 1
    exchange.forget(["m0"])
    assert exchange.in_flight == 0


def test_refused_messages_have_no_id_and_are_not_waited_for() -> None:
    grid = ScriptedGrid([0, 0], refuse=frozenset({0}))
    exchange = Exchange(grid, poll_interval_s=0.001)  # type: ignore[arg-type]
    ids = exchange.push(messages(2), lambda reply: None)
    assert ids[0] is None and ids[1] is not None
    assert exchange.in_flight == 1


def test_the_poll_interval_must_be_positive() -> None:
    grid: Any = ScriptedGrid([])
    with pytest.raises(ValueError, match="poll_interval_s must be > 0"):
        Exchange(grid, poll_interval_s=0)
