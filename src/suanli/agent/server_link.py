"""How an agent holds its work dir and reaches the platform: the saved node key (`agent.json`, mode 0600),
registering with the join token (again when the key is refused), the servers it moves between."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
from typing import TYPE_CHECKING

from tenacity import Retrying, retry_if_exception_type, stop_when_event_set, wait_exponential

from suanli.client import ApiError, Client, ServerUnreachable
from suanli.domain.errors import SuanliError

if TYPE_CHECKING:
    from suanli.agent.runner import AgentRunner

log = logging.getLogger(__name__)
STATE_FILE = "agent.json"
LOCK_FILE = "agent.lock"  # held by the agent that runs on this work dir
MAX_BACKOFF_S = 5.0


class AgentError(SuanliError):
    """The agent cannot go on: no saved key and no usable join token."""


class ServerLink:
    """The node key and the server an `AgentRunner` talks to, a part of it."""

    @property
    def server_url(self: AgentRunner) -> str:
        """The server this agent talks to now."""
        return self.server_urls[self.server_index]

    def _next_server(self: AgentRunner) -> bool:
        """Move to the next server (with the same node key), once around the list: False when the list has
        come round to the first again (the caller backs off) or there is no other."""
        if len(self.server_urls) < 2:
            return False
        self.server_index = (self.server_index + 1) % len(self.server_urls)
        if self._client is not None and self._node_key is not None:
            self._client.close()
            self._client = self._client_factory(self.server_url, self._node_key)
        log.warning("moving to server %s", self.server_url)
        return self.server_index != 0

    def _hold_work_dir(self: AgentRunner) -> None:
        """One agent per work dir: a second adopted the first's workloads, shipped their output twice and
        killed three tenants' rentals when it stopped (AgentError when another holds it)."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.work_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(descriptor)
            raise AgentError(
                f"another agent runs on {self.work_dir} (it holds {LOCK_FILE}): one agent per work dir"
            ) from None
        self._lock = descriptor

    def _connect(self: AgentRunner, stopping: threading.Event) -> None:
        saved = self._load_state()
        if saved is not None:
            if self.expected_node is not None and saved["node"] != self.expected_node:
                raise AgentError(
                    f"{self.work_dir} holds the node key of {saved['node']}, not of {self.expected_node}: "
                    "give each node's agent a --work-dir of its own"
                )
            self.node = saved["node"]
            if (
                saved.get("server") not in self.server_urls
            ):  # another server of the platform: the key is the node's
                log.warning(
                    "the node key was saved with %s; using it with %s", saved.get("server"), self.server_url
                )
                self._save_state(saved["node"], saved["node_key"])
            self._node_key = saved["node_key"]
            self._client = self._client_factory(self.server_url, saved["node_key"])
            return
        self._register(stopping, force=False)

    def _register_or_give_up(self: AgentRunner, stopping: threading.Event) -> None:
        """Register again after the server refused the node key; when that is refused too (the node was
        removed, re-owned or joined by another agent), stop every workload and command here before exiting:
        the node is no longer this agent's, and a workload left running would run unbilled on GPUs let to
        others, or beside its copy started by the node's new agent."""
        try:
            self._register(stopping, force=True)
        except AgentError:
            log.error("this agent no longer holds the node; stopping its workloads before exiting")
            self._give_up_workloads()
            raise

    def _register(self: AgentRunner, stopping: threading.Event, *, force: bool) -> None:
        if not self.join_token:
            raise AgentError("no saved node key for this server and no join token: pass --token")
        token = self.join_token
        inventory = self.inventory.to_dict()
        if self.advertise_host:
            inventory["hostname"] = self.advertise_host
        try:
            for attempt in Retrying(
                retry=retry_if_exception_type(ServerUnreachable),
                wait=wait_exponential(multiplier=0.2, max=MAX_BACKOFF_S),
                stop=stop_when_event_set(stopping),
                before_sleep=lambda _: self._next_server(),  # each try to the next server
                reraise=True,
            ):
                with attempt:
                    anonymous = self._client_factory(self.server_url, None)
                    try:
                        answer = anonymous.register_agent(token, inventory)
                    finally:
                        anonymous.close()
        except ApiError as error:
            raise AgentError(f"registration refused: {error.message}") from None
        self.node = answer.node
        if self.fixed_interval_s is None:
            self.interval_s = answer.heartbeat_interval_s
        self._save_state(answer.node, answer.node_key)
        self._node_key = answer.node_key
        self._client = self._client_factory(self.server_url, answer.node_key)
        log.info("registered as node %s", answer.node)

    def _require_client(self: AgentRunner) -> Client:
        if self._client is None:
            raise AgentError("not registered")
        return self._client

    def _load_state(self: AgentRunner) -> dict[str, str] | None:
        path = self.work_dir / STATE_FILE
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if not data.get("node_key") or not data.get("node"):
            return None
        return data

    def _save_state(self: AgentRunner, node: str, node_key: str) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        path = self.work_dir / STATE_FILE
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            json.dump({"server": self.server_url, "node": node, "node_key": node_key}, handle)
