"""Which Flower node serves which thinwire client, and which clients can take part.

Flower names SuperNodes by random node ids; thinwire's round logic names clients by index
(the partition each SuperNode was started with). The ServerApp asks every node it has not
identified yet for its partition once (an identify query), and keeps the answers here:

- a node whose `num-partitions` (when it was given one) differs from the experiment's
  `data.clients`, or whose partition is out of range, is refused for the whole run (it was
  started for another experiment), with one error in the log;
- a later node claiming a partition that is already served replaces the earlier one (a
  restarted client host gets a new node id), and the earlier one is never asked again;
- a client whose node misses a round is dropped; if its node is still listed by the
  SuperLink it is asked again, and rejoins as soon as it answers.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from flwr.app import Message
from flwr.common.constant import ErrorCode

from thinwire.runtimes.flower.messages import Identity, read_identity
from thinwire.wire import WireError

__all__ = ["Roster"]

logger = logging.getLogger(__name__)


TRANSIENT_ERRORS = frozenset(
    {ErrorCode.MESSAGE_UNAVAILABLE, ErrorCode.REPLY_MESSAGE_UNAVAILABLE, ErrorCode.NODE_UNAVAILABLE}
)
"""Error codes of messages the SuperLink lost or expired, as opposed to a ClientApp's failure."""


class Roster:
    """The node of each reachable client; see the module docstring."""

    def __init__(self, clients: int) -> None:
        if clients < 1:
            raise ValueError(f"a roster needs at least one client, got {clients}")
        self.clients = clients
        self._live: dict[int, int] = {}  # client index -> node id
        self._asking: set[int] = set()  # nodes with an identify query in flight
        self._retired: set[int] = set()  # refused or replaced nodes: never asked again
        self._served_by: dict[int, int] = {}  # client index -> the last node that served it

    def live(self) -> list[int]:
        """The indices of the clients that can take part now, sorted."""
        return sorted(self._live)

    def node(self, client: int) -> int:
        """The node id serving `client` (which must be live)."""
        return self._live[client]

    def complete(self) -> bool:
        """Whether every client has a live node."""
        return len(self._live) == self.clients

    def to_ask(self, listed: Iterable[int]) -> list[int]:
        """The listed nodes to send an identify query to, marking them as asked.

        Args:
            listed: the node ids the SuperLink reports as connected.
        """
        listed = set(listed)
        for client, node in list(self._live.items()):
            if node not in listed:
                logger.warning("client %d: node %d left the federation", client, node)
                del self._live[client]
        self._asking &= listed
        known = set(self._live.values()) | self._asking | self._retired
        new = sorted(listed - known)
        self._asking.update(new)
        return new

    def identified(self, node: int, identity: Identity) -> int | None:
        """Records a node's answer to the identify query.

        Returns:
            The client, if a node other than the one that served it before serves it now
            (a restarted host: it holds none of the state of the earlier node).
        """
        self._asking.discard(node)
        if node in self._retired:
            return None
        if identity.partitions not in (None, self.clients) or identity.partition >= self.clients:
            of = f" of {identity.partitions}" if identity.partitions is not None else ""
            logger.error(
                "node %d serves partition %d%s, but this experiment has %d clients "
                "(data.clients); it is left out of the run",
                node,
                identity.partition,
                of,
                self.clients,
            )
            self._retired.add(node)
            return None
        client = identity.partition
        current = self._live.get(client)
        if current is not None and current != node:
            logger.warning("client %d: node %d replaces node %d", client, node, current)
            self._retired.add(current)
        elif current is None:
            logger.info("client %d: served by node %d", client, node)
        self._live[client] = node
        previous = self._served_by.get(client)
        self._served_by[client] = node
        return client if previous is not None and previous != node else None

    def answer(self, node: int, reply: Message) -> None:
        """Records a node's reply (or error) to an identify query.

        A message the SuperLink lost is asked again later; a ClientApp's error or a malformed
        identity leaves the node out. A new node for a known client (a restarted host)
        continues from the state in its state folder; one that has none answers StateLost
        and is re-synchronized.
        """
        if reply.has_error():
            reason = f"error {reply.error.code}: {reply.error.reason}"
            if reply.error.code in TRANSIENT_ERRORS:
                self.unanswered(node, reason)
            else:
                self.refuse(node, reason)
            return
        try:
            self.identified(node, read_identity(reply.content))
        except WireError as exc:
            self.refuse(node, f"malformed identity: {exc}")

    def unanswered(self, node: int, reason: str) -> None:
        """Records that a node's identify query failed; it is asked again later."""
        logger.info("node %d did not identify itself: %s", node, reason)
        self._asking.discard(node)

    def refuse(self, node: int, reason: str) -> None:
        """Leaves a node out of the run for good (its answer was unusable)."""
        logger.error("node %d is left out of the run: %s", node, reason)
        self._asking.discard(node)
        self._retired.add(node)

    def drop(self, client: int) -> None:
        """Takes `client` out until its node answers an identify query again."""
        self._live.pop(client, None)
