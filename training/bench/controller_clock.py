"""A Ray Train callback that marks when the run's controller is up. Its own module so that the bench's command line
(``--help``, a refused key, the plain runs) does not import Ray: only a Ray run imports it."""

from __future__ import annotations

import os
import time

from ray.train import UserCallback


class ControllerClock(UserCallback):
    """Marks when Ray Train's controller is up: a ``UserCallback`` is unpickled in the controller's process as it
    starts (timed from inside, with the wall clock the workers' marks use), before it creates the worker group."""

    def __init__(self, queue):
        self.queue = queue

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.queue.put({"marks": {"controllerUp": time.time(), "controllerPid": os.getpid()}})
