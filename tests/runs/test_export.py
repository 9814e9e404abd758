"""kaleido_png: a render that lost kaleido's page-load race is tried again; nothing else is."""

from __future__ import annotations

import pytest

from probe.runs.export import KALEIDO_RACE, KALEIDO_TRIES, kaleido_png


class Flaky:
    """A figure whose first ``failures`` renders raise ``message`` and whose next one writes the file."""

    def __init__(self, failures: int, message: str):
        self.failures, self.message, self.calls = failures, message, 0

    def write_image(self, path, format, scale):
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError(f"{{'className': 'ReferenceError', 'description': '{self.message}'}}")
        with open(path, "wb") as handle:
            handle.write(b"\x89PNG" + bytes([scale]))


def test_a_lost_page_load_race_is_rendered_again(tmp_path):
    figure = Flaky(KALEIDO_TRIES - 1, KALEIDO_RACE)
    kaleido_png(figure, tmp_path / "a.png", scale=3)
    assert figure.calls == KALEIDO_TRIES and (tmp_path / "a.png").read_bytes() == b"\x89PNG\x03"


def test_the_race_lost_every_time_raises_after_the_last_try(tmp_path):
    figure = Flaky(KALEIDO_TRIES, KALEIDO_RACE)
    with pytest.raises(RuntimeError, match=KALEIDO_RACE):
        kaleido_png(figure, tmp_path / "a.png")
    assert figure.calls == KALEIDO_TRIES and not (tmp_path / "a.png").exists()


def test_any_other_error_raises_at_once(tmp_path):
    figure = Flaky(1, "Plotly is not defined")
    with pytest.raises(RuntimeError, match="Plotly is not defined"):
        kaleido_png(figure, tmp_path / "a.png")
    assert figure.calls == 1
