"""Parse vLLM's Prometheus `/metrics` text into samples (prometheus_client's parser)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def parse_metrics(text: str) -> list[Sample]:
    samples: list[Sample] = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.append(Sample(s.name, dict(s.labels), float(s.value)))
    return samples


def find_samples(samples: list[Sample], name: str) -> list[Sample]:
    return [s for s in samples if s.name == name]


def info_labels(text: str, name: str) -> dict[str, str] | None:
    """Labels of an info-style gauge (value 1), e.g. vllm:cache_config_info; None when absent."""
    found = find_samples(parse_metrics(text), name)
    return dict(found[0].labels) if found else None
