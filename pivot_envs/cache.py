"""A thread-safe bounded LRU cache with single flight, for results that are costly to compute (a sandbox run, a
world replay, a search) and asked for by many threads at once."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from typing import Callable, Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class LRUCache(Generic[K, T]):
    """A thread-safe bounded LRU with single flight: concurrent misses on one key compute it once.

    Callers waiting on a failed computation get the same exception. Exceptions are not cached,
    except for ``failure_ttl_s`` seconds when that is set: until then a get on the key raises
    the remembered exception again without computing.
    """

    def __init__(self, maxsize: int, failure_ttl_s: float = 0.0) -> None:
        self.maxsize = maxsize
        self.failure_ttl_s = failure_ttl_s
        self._data: OrderedDict[K, T] = OrderedDict()
        self._inflight: dict[K, Future] = {}
        self._failed: dict[K, tuple[float, BaseException]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)

    def get_or_compute(self, key: K, compute: Callable[[], T]) -> tuple[T, bool]:
        """``(value, hit)``: the cached value, or the value computed now (hit = False for the computer)."""
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key], True
            failed = self._failed.pop(key, None)
            if failed is not None and failed[0] > time.monotonic():
                self._failed[key] = failed
                raise failed[1].with_traceback(None)
            future = self._inflight.get(key)
            owner = future is None
            if owner:
                future = self._inflight[key] = Future()
        assert future is not None
        if not owner:
            return future.result(), True
        try:
            value = compute()
        except BaseException as exc:
            with self._lock:
                del self._inflight[key]
                if self.failure_ttl_s > 0 and isinstance(exc, Exception):
                    self._failed[key] = (time.monotonic() + self.failure_ttl_s, exc)
                    while len(self._failed) > self.maxsize:
                        del self._failed[next(iter(self._failed))]
            future.set_exception(exc)
            raise
        with self._lock:
            del self._inflight[key]
            self._data[key] = value
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)
        future.set_result(value)
        return value, False
