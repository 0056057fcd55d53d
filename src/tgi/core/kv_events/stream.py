"""What the engine drives: the recorder on the block manager, and after each step its events to the publisher.

Kept apart from the engine so that the engine imports neither msgspec nor zmq: `publisher.py` is imported here
only when the config publishes.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tgi.core.block_manager import BlockManager
from tgi.core.kv_events.events import KVEventRecorder, KVEventsConfig
from tgi.core.sequence import Sequence


class KVEventStream:
    """Records `block_manager`'s prefix-cache changes and publishes them as one batch per engine step."""

    def __init__(
        self,
        config: KVEventsConfig,
        block_manager: BlockManager,
        lora_id_of: Callable[[Sequence], int | None],
    ) -> None:
        self.recorder = KVEventRecorder(block_manager.block_size, lora_id_of)
        block_manager.observers.append(self.recorder)
        self.publisher = None
        if config.publishes:
            from tgi.core.kv_events.publisher import ZmqEventPublisher

            self.publisher = ZmqEventPublisher(config)

    def end_step(self) -> None:
        """Publish the events of the step that ended (nothing when it changed nothing)."""
        events = self.recorder.drain()
        if events and self.publisher is not None:
            self.publisher.publish(time.time(), events)

    def close(self) -> None:
        self.end_step()
        if self.publisher is not None:
            self.publisher.close()
