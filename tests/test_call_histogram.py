"""The dispatch duration histogram (supervisor/observability/call_histogram.py) exports what
prometheus-client's Histogram would for the same observations, and loses none under threads."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from supervisor.observability.call_histogram import CallHistogram
from supervisor.observability.metrics import LONG_LATENCY_BUCKETS

NAME = "calls_seconds"


def _pair() -> tuple[CollectorRegistry, CallHistogram, CollectorRegistry, Histogram]:
    ours_registry, theirs_registry = CollectorRegistry(), CollectorRegistry()
    ours = CallHistogram(NAME, "Calls.", ["group", "method"], LONG_LATENCY_BUCKETS, ours_registry)
    theirs = Histogram(NAME, "Calls.", ["group", "method"], buckets=LONG_LATENCY_BUCKETS, registry=theirs_registry)
    return ours_registry, ours, theirs_registry, theirs


def _samples(registry: CollectorRegistry) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
    text = generate_latest(registry).decode()
    out = []
    for family in text_string_to_metric_families(text):
        out += [(s.name, tuple(sorted(s.labels.items())), s.value) for s in family.samples if not s.name.endswith("_created")]
    return sorted(out)


durations = st.one_of(
    st.sampled_from([0.0, *LONG_LATENCY_BUCKETS, 5000.0]),  # on a bound (le is inclusive), past the last
    st.floats(min_value=0.0, max_value=4000.0, allow_nan=False),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["gen", "fit"]), durations), max_size=60))
def test_exports_the_series_prometheus_clients_histogram_would(observations):
    ours_registry, ours, theirs_registry, theirs = _pair()
    for group, method, seconds in observations:
        ours.series(group, method).observe(seconds)
        theirs.labels(group=group, method=method).observe(seconds)
    ours_samples, theirs_samples = _samples(ours_registry), _samples(theirs_registry)
    assert [s[:2] for s in ours_samples] == [s[:2] for s in theirs_samples]
    for (name, labels, value), (_, _, expected) in zip(ours_samples, theirs_samples, strict=True):
        assert value == pytest.approx(expected, rel=1e-9), (name, labels)


def test_type_and_help_lines_are_a_histograms():
    ours_registry, ours, theirs_registry, _ = _pair()
    ours.labels(group="g", method="m").observe(0.5)
    text = generate_latest(ours_registry).decode()
    assert f"# HELP {NAME} Calls.\n# TYPE {NAME} histogram\n" in text
    assert f'{NAME}_bucket{{group="g",le="+Inf",method="m"}} 1.0' in text


def test_no_observation_is_lost_under_threads():
    registry = CollectorRegistry()
    histogram = CallHistogram(NAME, "Calls.", ["group", "method"], LONG_LATENCY_BUCKETS, registry)
    threads, per_thread = 4, 20_000

    def observe() -> None:
        series = histogram.series("g", "m")
        for i in range(per_thread):
            series.observe(0.001 * (i % 3))

    workers = [threading.Thread(target=observe) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert registry.get_sample_value(f"{NAME}_count", {"group": "g", "method": "m"}) == threads * per_thread
    assert registry.get_sample_value(f"{NAME}_bucket", {"group": "g", "method": "m", "le": "0.0001"}) == threads * (per_thread // 3 + 1)


def test_removing_by_a_label_drops_only_its_label_sets_and_a_later_observation_starts_again():
    registry = CollectorRegistry()
    histogram = CallHistogram(NAME, "Calls.", ["group", "method"], LONG_LATENCY_BUCKETS, registry)
    for group in ("g", "h"):
        histogram.series(group, "m").observe(1.0)
        histogram.series(group, "n").observe(1.0)
    histogram.remove_by_labels({"group": "g"})
    groups = {labels for _, labels, _ in _samples(registry)}
    assert {dict(labels)["group"] for labels in groups} == {"h"}
    histogram.series("g", "m").observe(2.0)
    assert registry.get_sample_value(f"{NAME}_count", {"group": "g", "method": "m"}) == 1.0
    assert registry.get_sample_value(f"{NAME}_sum", {"group": "g", "method": "m"}) == 2.0


def test_wrong_labels_are_one_line_errors():
    histogram = CallHistogram(NAME, "Calls.", ["group", "method"], LONG_LATENCY_BUCKETS, CollectorRegistry())
    with pytest.raises(ValueError, match=r"calls_seconds: 2 label values expected \(group, method\), got 1"):
        histogram.series("g")
    with pytest.raises(ValueError, match="calls_seconds: label 'method' missing"):
        histogram.labels(group="g")
