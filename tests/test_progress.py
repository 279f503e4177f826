"""The progress line: counts, elapsed time and an estimate of the time left."""

from __future__ import annotations

import io

from edgegcl_embed.progress import Progress, clock


def test_clock_formats_durations():
    assert clock(7) == "0:07" and clock(245) == "4:05" and clock(3723) == "1:02:03"


def test_progress_shows_the_time_left_from_the_pace_so_far(monkeypatch):
    import edgegcl_embed.progress as progress

    now = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    out = io.StringIO()
    bar = Progress(10, "seed 1/1", stream=out, every_s=0.0)
    now[0] = 130.0
    bar.update(2.5, "epoch 3: batch 1/2")  # 30 s for 2.5 units: 90 s for the 7.5 left
    now[0] = 200.0
    bar.update(10, "done")
    first, last = out.getvalue().splitlines()
    assert first == "seed 1/1 [######..................] 2/10 0:30, ETA 1:30 | epoch 3: batch 1/2"
    assert last == "seed 1/1 [########################] 10/10 1:40 | done"


def test_a_resumed_line_rates_only_the_units_done_since_it_began(monkeypatch) -> None:
    import io

    import edgegcl_embed.progress as progress

    now = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    out = io.StringIO()
    bar = progress.Progress(100, "seed 1/1", stream=out, every_s=0.0, start=50)
    now[0] = 10.0
    bar.update(60)  # 10 epochs in 10 s: 40 left take 40 s
    assert "60/100 0:10, ETA 0:40" in out.getvalue()
