"""Report pieces that need no workflow run: which curve is plotted, benchmark seconds, atomic
PNG writing, and refusal of a summary without its receipt."""

from __future__ import annotations

import pytest

from replaykit.harness.errors import InputError
from replaykit.report import figures
from replaykit.report.html import write_report


def test_curve_key_prefers_the_plugin_then_loss():
    history = [{"progress": 1, "loss": 0.7, "rewards/margins": 0.1}, {"progress": 2, "loss": 0.6}]
    assert figures.curve_key(history) == "loss"
    assert figures.curve_key(history, "rewards/margins") == "rewards/margins"
    assert figures.curve_key([{"progress": 1, "proxy_accuracy": 0.9}]) == "proxy_accuracy"
    assert figures.curve_key([]) is None


def test_benchmark_seconds_sum_the_s_column(tmp_path):
    header = "s\th:m:s\tmax_rss\n"
    (tmp_path / "validate-8.tsv").write_text(header + "1.5\t0:00:01\t100\n")
    (tmp_path / "validate-16.tsv").write_text(header + "2.25\t0:00:02\t100\n")
    (tmp_path / "score-final-8.tsv").write_text(header + "10\t0:00:10\t100\n")
    assert figures._benchmark_seconds(tmp_path, "validate") == 3.75
    assert figures._benchmark_seconds(tmp_path, "score-final") == 10.0


def test_budget_figure_is_written_atomically_and_readable(tmp_path):
    from PIL import Image

    record = {
        "task": "dpo",
        "run": "shipped-seed42",
        "wall_s": 100.0,
        "stop_reason": "deadline",
        "budget": {"outer_limit_s": 900, "internal_deadline_s": 600, "export_reserve_s": 120},
        "utilisation": {
            "wall_s_all_attempts": 150.0,
            "setup_s": 10,
            "train_s": 85,
            "publish_s": 5,
            "idle_s": 5,
            "budget_fraction": 150 / 900,
        },
    }
    out = figures.budget_use({"task": "dpo", "run": "shipped-seed42"}, record, tmp_path / "budget.png")
    assert [p.name for p in tmp_path.iterdir()] == ["budget.png"]  # no temporary file left
    assert oct(out.stat().st_mode & 0o777) == "0o644"
    with Image.open(out) as im:
        assert im.format == "PNG"


def test_report_refuses_a_final_summary_without_its_receipt(tmp_path):
    final = tmp_path / "final"
    final.mkdir()
    (final / "summary.json").write_text("{}")
    with pytest.raises(InputError, match="complete"):
        write_report(
            task="dpo",
            final_dir=final,
            officials=[],
            figures={},
            n_boot=10,
            scale=1.0,
            out_html=tmp_path / "r.html",
            out_table=tmp_path / "t.html",
        )
    assert not (tmp_path / "r.html").exists()
