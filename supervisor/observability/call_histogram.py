"""A labelled Prometheus histogram for the hot path: one observation per bound group method call.

prometheus-client's ``Histogram.observe`` takes a lock for the sum and another for the bucket it
walks to, and its ``labels()`` takes a third: about 0.9 µs a call on this machine, which was most of
what a one-rank call cost the driver over verl's (bench/dispatch.py, driver side). This one finds the
bucket by bisection, updates its counts under one lock, and finds a label set without a lock once it
exists (about 0.3 µs). It exports the same series, in the same registry, as a prometheus-client
histogram would, less ``_created`` (which ``/metrics`` leaves out anyway).
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.utils import floatToGoString

__all__ = ["CallHistogram", "CallSeries"]


class CallSeries:
    """One label set's bucket counts and sum."""

    __slots__ = ("_bounds", "_counts", "_sum", "_lock")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self._counts = [0] * len(bounds)  # per bucket, not cumulative: an observation touches one
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, amount: float) -> None:
        # bisect_left: the first bound >= amount, Prometheus's `le` (the last bound is +Inf).
        index = bisect_left(self._bounds, amount)
        with self._lock:
            self._counts[index] += 1
            self._sum += amount

    def snapshot(self) -> tuple[list[int], float]:
        """Cumulative bucket counts and the sum, read together."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        running = 0
        for i, count in enumerate(counts):
            running += count
            counts[i] = running
        return counts, total


class CallHistogram:
    """A histogram with labels, registered in ``registry`` under ``name``.

    ``_name``, ``_type`` and ``_labelnames`` are named as in prometheus-client's metrics, so code that
    lists the metric definitions (the dashboards' and ops' checks, forgetting a label) reads both alike.
    """

    _type = "histogram"

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float], registry: CollectorRegistry
    ) -> None:
        bounds = tuple(sorted(float(b) for b in buckets))
        if not bounds or bounds[-1] != math.inf:
            bounds = (*bounds, math.inf)
        self._name = name
        self._documentation = documentation
        self._labelnames = tuple(labelnames)
        self._bounds = bounds
        self._series: dict[tuple[str, ...], CallSeries] = {}
        self._lock = threading.Lock()  # taken to add or remove a label set, never to observe
        registry.register(self)

    def series(self, *labelvalues: str) -> CallSeries:
        """The series of these label values (in ``labelnames`` order), created on first use."""
        found = self._series.get(labelvalues)
        if found is not None:
            return found
        if len(labelvalues) != len(self._labelnames):
            raise ValueError(f"{self._name}: {len(self._labelnames)} label values expected ({', '.join(self._labelnames)}), got {len(labelvalues)}")
        with self._lock:
            return self._series.setdefault(tuple(str(v) for v in labelvalues), CallSeries(self._bounds))

    def observe(self, amount: float, *labelvalues: str) -> None:
        """Observe ``amount`` in the series of these label values (one call fewer than
        ``series(...).observe(amount)``: this runs once per bound group method call)."""
        series = self._series.get(labelvalues) or self.series(*labelvalues)
        index = bisect_left(self._bounds, amount)
        with series._lock:
            series._counts[index] += 1
            series._sum += amount

    def labels(self, **labels: str) -> CallSeries:
        """As prometheus-client's ``labels()``: the series of these label values."""
        try:
            return self.series(*(labels[n] for n in self._labelnames))
        except KeyError as exc:
            raise ValueError(f"{self._name}: label {exc} missing") from None

    def remove_by_labels(self, labels: dict[str, str]) -> None:
        """Stop exporting every label set that has these label values."""
        positions = [(self._labelnames.index(k), v) for k, v in labels.items() if k in self._labelnames]
        with self._lock:
            for key in [k for k in self._series if all(k[i] == v for i, v in positions)]:
                del self._series[key]

    def describe(self) -> list[HistogramMetricFamily]:
        return [HistogramMetricFamily(self._name, self._documentation, labels=self._labelnames)]

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self._name, self._documentation, labels=self._labelnames)
        les = [floatToGoString(b) for b in self._bounds]
        with self._lock:
            series = list(self._series.items())
        for key, one in series:
            counts, total = one.snapshot()
            family.add_metric(list(key), list(zip(les, counts, strict=True)), total)
        yield family

    def __repr__(self) -> str:
        return f"<CallHistogram {self._name} {self._labelnames}>"

