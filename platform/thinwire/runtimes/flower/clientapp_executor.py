"""A SuperNode's ClientApp messages, every one run in a single long-lived process.

Flower's SuperExec starts a fresh `flwr-clientapp` process for every message. Each one imports
Flower and torch, builds the client and reads its state back from disk before it trains, and
writes the state again before it answers: at 10M parameters on two cores that is most of a
round, and the same on any network. `ClientAppExecutor` takes the SuperExec's place beside a
SuperNode started with `--isolation process` (`thinwire client` does both): it claims the
node's ClientApp tasks over the SuperNode's Runtime API and runs each as `flwr-clientapp`
does (pull the message, context and FAB; install the FAB; load its ClientApp; call it; push
the reply, then the context), but in this process. Imports stay loaded, and thinwire's
ClientApp keeps the client it built between messages (`thinwire.runtimes.flower.client_app`).

Work a ClientApp hands to `defer` runs after its reply has been pushed and before its context
is: thinwire's ClientApp saves the client's state there, so the server's round does not wait
for the disk. Outside an executor's task (a fresh `flwr-clientapp` process, a test calling
the app) `defer` queues nothing and the caller does the work itself.

The app's own dependencies are not installed per run (a running process could not load
them): the executor runs what is installed beside thinwire, as the docker image does.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

import httpx
from flwr.app import Context, Error, Message
from flwr.cli.install import install_from_fab
from flwr.clientapp import ClientApp
from flwr.clientapp.client_app import LoadClientAppError
from flwr.clientapp.utils import get_load_client_app_fn
from flwr.common.constant import ErrorCode, SubStatus
from flwr.proto.runtime_pb2 import AcquireTaskRequest  # pylint: disable=E0611
from flwr.supercore.constant import TaskType
from flwr.supercore.heartbeat import HeartbeatSender, make_task_heartbeat_fn_http
from flwr.supercore.interceptors import RuntimeTokenHttpInterceptor, RuntimeVersionHttpInterceptor
from flwr.supercore.protobuf.client import ProtobufClientInterceptor
from flwr.supercore.retry import make_simple_http_retry_invoker
from flwr.supercore.runtime import RuntimeHttpClient
from flwr.supernode.runtime.run_clientapp import (
    pull_task_input,
    push_message,
    push_task_output,
)

__all__ = ["ClientAppExecutor", "defer", "executor_task", "in_task", "main"]

logger = logging.getLogger(__name__)

_TASK_RETRY_S = 60.0
"""How long one task's Runtime API calls are retried (a dead SuperNode fails the task)."""

_ACQUIRE_RETRY_S = 5.0
"""How long one request for a task is retried before `serve` checks whether to stop."""

_pending: list[Callable[[], None]] | None = None
"""The work queued by `defer` during the task running now; None outside an executor's task."""


def in_task() -> bool:
    """Whether the code calling this runs inside a `ClientAppExecutor`'s task.

    A ClientApp may then keep what it built for the next message of this process.
    """
    return _pending is not None


def defer(work: Callable[[], None]) -> bool:
    """Queues `work` to run once this message's reply has been pushed.

    Returns:
        True if it was queued (inside an executor's task); False if not, and then nothing
        was queued: the caller must do the work before it replies.
    """
    if _pending is None:
        return False
    _pending.append(work)
    return True


@contextmanager
def executor_task() -> Iterator[list[Callable[[], None]]]:
    """The scope `ClientAppExecutor.run_task` calls a ClientApp in; yields the deferred work.

    Tests call an app inside it to see what it does under the executor.
    """
    global _pending
    if _pending is not None:
        raise RuntimeError("an executor task is already running in this process")
    queued: list[Callable[[], None]] = []
    _pending = queued
    try:
        yield queued
    finally:
        _pending = None


class ClientAppExecutor:
    """Claims a SuperNode's ClientApp tasks and runs each in this process.

    The SuperNode's Runtime API is served on the node's own loopback in plain HTTP (Flower's
    default for a SuperNode without `--ssl-certfile`), which is how this executor reaches it.

    Args:
        runtime_api: the SuperNode's Runtime API, host:port (its `--port`).
        poll_s: how often to ask for a pending task.
    """

    def __init__(self, runtime_api: str, *, poll_s: float = 0.05) -> None:
        if not poll_s > 0:
            raise ValueError(f"poll_s must be > 0, got {poll_s}")
        self.runtime_api = runtime_api
        self.poll_s = poll_s
        self.tasks = 0
        self._stopping = threading.Event()
        self._load_app = get_load_client_app_fn(default_app_ref="", app_path=None, multi_app=True)

    def stop(self) -> None:
        """Ends `serve` after the task it runs now (if any)."""
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        """Whether `stop` was called."""
        return self._stopping.is_set()

    def serve(self) -> None:
        """Claims and runs tasks until `stop`; waits out a SuperNode that is down."""
        acquirer = self._client(token=None, component="SuperExec")
        logger.info("running the ClientApp messages of the SuperNode at %s", self.runtime_api)
        try:
            while not self._stopping.is_set():
                try:
                    claimed = acquirer.AcquireTask(
                        AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP])
                    )
                except httpx.HTTPError as exc:  # the retry invoker gave up; try again
                    logger.warning("cannot reach the SuperNode at %s: %s", self.runtime_api, exc)
                    self._stopping.wait(1.0)
                    continue
                if claimed.HasField("task") and claimed.token:
                    self.run_task(claimed.token)
                    continue  # another message may be waiting already
                self._stopping.wait(self.poll_s)
        finally:
            acquirer.close()

    def run_task(self, token: str) -> None:
        """Runs the ClientApp task `token` names, as a `flwr-clientapp` process would."""
        client = self._client(token=token, component="flwr-clientapp")
        heartbeat = HeartbeatSender(make_task_heartbeat_fn_http(client))
        heartbeat.start()
        message: Message | None = None
        context: Context | None = None
        reply: Message | None = None
        status, details = SubStatus.FAILED, "ClientApp task failed due to unknown reason"
        queued: list[Callable[[], None]] = []
        started = time.perf_counter()
        try:
            message, context, run, fab = pull_task_input(client)
            install_from_fab(fab.content, skip_prompt=True)
            app: ClientApp = self._load_app(run.fab_id, run.fab_version, fab.hash_str)
            with executor_task() as queued:
                reply = app(message=message, context=context)
            status, details = SubStatus.COMPLETED, ""
        except Exception as exc:  # the app's failure is the task's, never the executor's
            logger.error("the ClientApp raised an exception", exc_info=exc)
            queued.clear()  # its reply is an error: nothing it prepared may be kept
            details = f"{type(exc)}:<'{exc}'>"
            code = ErrorCode.CLIENT_APP_RAISED_EXCEPTION
            if isinstance(exc, LoadClientAppError):
                details = "An exception was raised when attempting to load `ClientApp`"
                code = ErrorCode.LOAD_CLIENT_APP_EXCEPTION
            if message is not None:
                reply = Message(Error(code=code, reason=details), reply_to=message)
        try:
            if reply is not None and context is not None:
                try:
                    push_message(client, reply, context)
                except Exception as exc:  # noqa: BLE001  (the deferred work still runs)
                    logger.error("cannot push the reply to the SuperNode", exc_info=exc)
                for work in queued:  # what a fresh process does before replying, done after
                    try:
                        work()
                    except Exception as exc:  # noqa: BLE001
                        logger.error("deferred work of the ClientApp failed", exc_info=exc)
            push_task_output(client=client, context=context, sub_status=status, details=details)
            if message is not None:
                logger.info(
                    "%s message of run %d: %s in %.2f s",
                    message.metadata.message_type,
                    message.metadata.run_id,
                    "answered" if status == SubStatus.COMPLETED else "failed",
                    time.perf_counter() - started,
                )
        finally:
            if heartbeat.is_running:
                heartbeat.stop()
            client.close()
            self.tasks += 1

    def _client(self, *, token: str | None, component: str) -> RuntimeHttpClient:
        retry = make_simple_http_retry_invoker()
        retry.max_time = _ACQUIRE_RETRY_S if token is None else _TASK_RETRY_S
        interceptors: list[ProtobufClientInterceptor] = [
            RuntimeVersionHttpInterceptor(component_name=component)
        ]
        if token is not None:
            interceptors.append(RuntimeTokenHttpInterceptor(token))
        return RuntimeHttpClient.from_server_address(
            server_address=self.runtime_api,
            insecure=True,
            root_certificates=None,
            interceptors=interceptors,
            retry_invoker=retry,
        )


def main(argv: list[str] | None = None) -> int:
    """`python -m thinwire.runtimes.flower.clientapp_executor --runtime-api-address HOST:PORT`."""
    parser = argparse.ArgumentParser(
        prog="python -m thinwire.runtimes.flower.clientapp_executor",
        description="Run a SuperNode's ClientApp messages in this one process.",
    )
    parser.add_argument(
        "--runtime-api-address", required=True, help="the SuperNode's Runtime API, host:port"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    # thinwire's ClientApp (torch with it) is imported now, not by the first round's message.
    import thinwire.runtimes.flower.client_app  # noqa: F401

    executor = ClientAppExecutor(args.runtime_api_address)

    def stop(signum: int, frame: FrameType | None) -> None:
        del frame
        if executor.stopping:  # a second signal: do not wait for the task to end
            raise SystemExit(128 + signum)
        executor.stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    executor.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
