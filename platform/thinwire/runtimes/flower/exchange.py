"""Pushing messages through a Flower `Grid` and collecting their replies with a short poll.

Flower's `Grid.send_and_receive` pulls replies every 3 s, which sets the pace of a round on
a fast network. An `Exchange` keeps every message in flight (train, evaluate and identify
queries alike) keyed by its message id, pulls them all every `poll_interval_s`, and hands
each reply to the handler registered with its message, so identify queries to newly seen
nodes are answered while a round runs instead of delaying it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from flwr.app import Message
from flwr.serverapp import Grid

__all__ = ["Exchange", "ReplyHandler"]

logger = logging.getLogger(__name__)

ReplyHandler = Callable[[Message], None]


class Exchange:
    """Messages in flight on a grid, each with the handler of its reply."""

    def __init__(self, grid: Grid, *, poll_interval_s: float) -> None:
        if not poll_interval_s > 0:
            raise ValueError(f"poll_interval_s must be > 0, got {poll_interval_s}")
        self.grid = grid
        self.poll_interval_s = poll_interval_s
        self._handlers: dict[str, ReplyHandler] = {}

    @property
    def in_flight(self) -> int:
        """How many pushed messages have not been answered (or forgotten) yet."""
        return len(self._handlers)

    def push(self, messages: Sequence[Message], handler: ReplyHandler) -> list[str | None]:
        """Pushes `messages`; each one's reply will go to `handler`.

        Returns:
            The message ids in the order of `messages`; None for a message the SuperLink
            refused (it will get no reply).
        """
        if not messages:
            return []
        ids: list[str | None] = list(self.grid.push_messages(messages))
        for message_id in ids:
            if message_id:
                self._handlers[message_id] = handler
        return ids

    def forget(self, message_ids: Sequence[str | None]) -> None:
        """Stops waiting for these messages (a late reply is never pulled)."""
        for message_id in message_ids:
            if message_id:
                self._handlers.pop(message_id, None)

    def wait(self, done: Callable[[], bool], deadline: float) -> bool:
        """Pulls and dispatches replies until `done()` or `time.monotonic()` passes `deadline`.

        Returns:
            Whether `done()` held when it returned.
        """
        while True:
            self._pull()
            if done():
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(self.poll_interval_s, remaining))

    def _pull(self) -> None:
        if not self._handlers:
            return
        for reply in self.grid.pull_messages(list(self._handlers)):
            handler = self._handlers.pop(reply.metadata.reply_to_message_id, None)
            if handler is None:
                logger.debug("dropping a reply to unknown message %s", reply.metadata)
                continue
            handler(reply)
