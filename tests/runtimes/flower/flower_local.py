"""A Flower `Grid` that runs thinwire's ClientApp in this process, for the ServerApp tests.

Every message and reply goes through Flower's own serialization (deflate, then inflate), so
records behave as they do on the wire. A node can be made dead (it never answers) or
swapped for another ClientApp (a faulty client).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from flwr.app import Context, Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects
from flwr.supercore.inflatable.inflatable_utils import inflate_object_from_contents
from flwr.supercore.task_identity import TaskIdentity

from thinwire.runtimes.flower.client_app import app as thinwire_client_app

ClientAppCallable = Callable[[Message, Context], Message]
FIRST_NODE = 1000


def set_task_identity() -> None:
    """Flower's Message constructor reads the identity the runtime would have set."""
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 0


def through_the_wire(message: Message) -> Message:
    objects = get_all_nested_objects(message)
    contents = {object_id: obj.deflate() for object_id, obj in objects.items()}
    copy = inflate_object_from_contents(message.object_id, contents)
    copy.metadata.__dict__["_message_id"] = message.metadata.message_id
    assert isinstance(copy, Message)
    return copy


class LocalGrid(Grid):
    """One in-process SuperNode per partition; node ids are FIRST_NODE + partition."""

    def __init__(
        self,
        run_config: Mapping[str, Any],
        partitions: int,
        *,
        node_configs: Mapping[int, dict[str, Any]] | None = None,
    ) -> None:
        self.client_apps: dict[int, ClientAppCallable] = {}
        self.contexts: dict[int, Context] = {}
        for i in range(partitions):
            node = FIRST_NODE + i
            node_config = {"partition-id": i, "num-partitions": partitions}
            self.contexts[node] = Context(
                run_id=1,
                node_id=node,
                node_config=dict((node_configs or {}).get(i, node_config)),
                state=RecordDict(),
                run_config=dict(run_config),
            )
            self.client_apps[node] = thinwire_client_app
        self.dead: set[int] = set()
        self.sent: list[Message] = []
        self._replies: dict[str, Message] = {}

    def node(self, partition: int) -> int:
        return FIRST_NODE + partition

    def restart(self, partition: int, node: int) -> None:
        """`partition`'s host comes back as `node`, with none of the old node's state."""
        old = self.contexts.pop(self.node(partition))
        self.client_apps[node] = self.client_apps.pop(self.node(partition))
        self.contexts[node] = Context(
            run_id=1,
            node_id=node,
            node_config=dict(old.node_config),
            state=RecordDict(),
            run_config=dict(old.run_config),
        )

    # Abstract members of Flower's Grid that thinwire's ServerApp never calls: a call here
    # would be a change in what the ServerApp needs, so it fails loudly instead of faking.
    def set_run(self, run: Any) -> None:
        raise NotImplementedError("LocalGrid has no Flower run")

    @property
    def run(self) -> Any:
        raise NotImplementedError("LocalGrid has no Flower run")

    def create_message(self, *args: Any, **kwargs: Any) -> Message:
        raise NotImplementedError("the ServerApp builds its messages with Message(...)")

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for message in messages:
            message_id = uuid.uuid4().hex
            message.metadata.__dict__["_message_id"] = message_id
            self.sent.append(message)
            ids.append(message_id)
            node = message.metadata.dst_node_id
            if node in self.dead:
                continue
            reply = self.client_apps[node](through_the_wire(message), self.contexts[node])
            reply.metadata.__dict__["_message_id"] = uuid.uuid4().hex
            self._replies[message_id] = through_the_wire(reply)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._replies.pop(i) for i in list(message_ids) if i in self._replies]

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        return self.pull_messages(self.push_messages(messages))

    def sent_of_type(self, message_type: str) -> list[Message]:
        return [m for m in self.sent if m.metadata.message_type == message_type]
