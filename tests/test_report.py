"""The HTML report on the campaign's tiny soup (conftest's ``campaign_run``): the candidate
patch ``greedy`` over two seeds plus the shipped reference, so the report holds three runs.
Numbers in the page are compared with the summaries they come from; the page is opened in
headless Chromium. The campaign's one build serves these tests (issue 26: the report had its
own two-seed dpo DAG, 335–364 s of the suite)."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import CAMPAIGN_SEEDS, snakemake

pytestmark = pytest.mark.slow
REPORT = "results/soup/report.html"
RUNS = ("greedy-seed42", "greedy-seed43", "shipped-seed42")
N_INGREDIENTS = 3  # conftest's soup_start: the greedy soup's rounds, one per ingredient


def read(path):
    return json.loads(Path(path).read_text())


class Page(HTMLParser):
    """Collects the checkpoint table's rows (their attributes and the data-value of each
    cell), the images and the links of a report page. A cell belongs to the checkpoint row it
    is in: the tables after it (seeds, ablation) have rows without ``data-run``."""

    def __init__(self, text: str):
        super().__init__()
        self.rows, self.images, self.links, self.body = [], [], [], {}
        self.headline, self.row = None, None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr":
            self.row = (
                {"run": a["data-run"], "progress": int(a["data-progress"]), "cells": {}} if "data-run" in a else None
            )
            if self.row is not None:
                self.rows.append(self.row)
        elif tag == "td" and self.row is not None and "class" in a and "data-value" in a:
            self.row["cells"][a["class"].split()[-1]] = a
        elif tag == "span" and a.get("class") == "value":
            self.headline = float(a["data-value"])
        elif tag == "img":
            self.images.append(a["src"])
        elif tag == "a":
            self.links.append(a["href"])
        elif tag == "body":
            self.body = a


@pytest.fixture
def two_seeds(campaign_run):
    """The campaign's tree and soup's ``greedy`` patch. Function-scoped on purpose: the tests
    are then no module group, and pytest-xdist deals them out in turn with the campaign's other
    readers (conftest's ``pytest_collection_modifyitems``)."""
    return campaign_run, campaign_run / "soup-greedy.diff"


def test_candidate_patch_over_two_seeds(two_seeds):
    from replaykit.harness.hashing import sha256_file

    work, patch = two_seeds
    final = read(work / "results/soup/final/summary.json")
    officials = [read(work / f"results/soup/greedy-seed{s}/official.json") for s in CAMPAIGN_SEEDS]
    values = [o["official"]["value"] for o in officials]
    assert final["seeds"]["n"] == 2
    assert final["seeds"]["mean"] == pytest.approx(statistics.mean(values))
    assert final["seeds"]["sd"] == pytest.approx(statistics.stdev(values))
    assert final["value"] == values[0] and final["official"]["run"] == "greedy-seed42"
    assert final["lineage"]["patch_sha256"] == sha256_file(patch)
    assert "method: greedy" in (work / "results/soup/greedy-seed42/workspace/configs/embedded.yaml").read_text()
    # the shipped reference is the unpatched recipe, replayed with the first seed
    shipped = read(work / "results/soup/shipped-seed42/official.json")
    assert shipped["patch_sha256"] is None
    assert final["references"]["shipped"]["value"] == shipped["official"]["value"]

    def rows(score_dir):
        lines = (work / score_dir / "rows.jsonl").read_text().splitlines()
        return {json.loads(line)["id"]: json.loads(line)["score"] for line in lines}

    cand, ship = rows(officials[0]["official"]["scores"]), rows(shipped["official"]["scores"])
    assert final["comparisons"]["vs_shipped"]["difference"] == pytest.approx(
        sum(cand[i] - ship[i] for i in cand) / len(cand)
    )


def test_report_lists_every_checkpoint_with_the_summaries_numbers(two_seeds):
    work, _ = two_seeds
    page = Page((work / REPORT).read_text())
    final = read(work / "results/soup/final/summary.json")
    assert page.headline == final["value"]
    expected = [(run, c) for run in RUNS for c in read(work / f"results/soup/{run}/official.json")["checkpoints"]]
    retained = [(run, p) for run in RUNS for p in read(work / f"results/soup/{run}/replay/record.json")["retained"]]
    assert [(r["run"], r["progress"]) for r in page.rows] == [(run, c["progress"]) for run, c in expected] == retained
    for row, (_run, c) in zip(page.rows, expected):
        score = row["cells"]["score"]
        assert float(score["data-value"]) == c["value"] and float(score["data-se"]) == c["se"]
        # each checkpoint's own score summary holds the same number
        assert read(work / c["scores"] / "summary.json")["value"] == c["value"]
    official = next(
        r for r in page.rows if (r["run"], r["progress"]) == ("greedy-seed42", final["official"]["progress"])
    )
    vs = final["comparisons"]["vs_shipped"]
    diff = official["cells"]["diff"]
    assert (float(diff["data-value"]), float(diff["data-ci-low"]), float(diff["data-ci-high"])) == (
        vs["difference"],
        vs["ci_low"],
        vs["ci_high"],
    )
    shipped_best = next(
        r
        for r in page.rows
        if r["run"] == "shipped-seed42"
        and r["progress"] == read(work / "results/soup/shipped-seed42/official.json")["official"]["progress"]
    )
    assert float(shipped_best["cells"]["diff"]["data-value"]) == 0.0  # the reference against itself


def test_report_embeds_every_figure_and_links_resolve(two_seeds):
    from PIL import Image

    work, _ = two_seeds
    page = Page((work / REPORT).read_text())
    pngs = [
        work / f"results/soup/{run}/figures/{kind}.png"
        for run in RUNS
        for kind in ("training", "checkpoints", "budget")
    ]
    pngs += [work / "results/soup/report/seeds.png", work / "results/soup/report/diagnostics.png"]
    pngs += [work / "results/soup/ablation/greedy/differences.png"]  # the campaign's `ablation.report: [greedy]`
    assert len(page.images) == len(pngs)
    import base64

    for src, png in zip(page.images, pngs):
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]) == png.read_bytes()
        with Image.open(png) as im:
            assert im.format == "PNG" and im.width > 300 and im.height > 150
    for href in page.links:
        assert (work / "results/soup" / href).resolve().exists(), href
    # the training curve comes from the replay record (one entry per greedy round)
    history = read(work / "results/soup/greedy-seed42/replay/record.json")["train_history"]
    assert [h["progress"] for h in history] == list(range(1, N_INGREDIENTS + 1))
    assert all("proxy_accuracy" in h for h in history)


def test_snakemake_report_collects_the_annotated_outputs(two_seeds, tmp_path):
    work, _ = two_seeds
    out = tmp_path / "snakemake-report.html"  # not in the shared tree, which stays read only
    snakemake(work, REPORT, "--report", str(out), check=True)
    text = out.read_text()
    for name in ("training.png", "checkpoints.png", "budget.png", "seeds.png", "diagnostics.png", "checkpoints.html"):
        assert name in text, name
    for run in RUNS:
        assert run in text


@pytest.mark.skipif(
    shutil.which("chromium") is None, reason="needs Debian's chromium (README: apt-get install chromium)"
)
def test_report_renders_in_headless_chromium(two_seeds, tmp_path):
    from PIL import Image

    work, _ = two_seeds
    url = (work / REPORT).resolve().as_uri()
    flags = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,6000"]
    dom = subprocess.run(
        [*flags, "--virtual-time-budget=5000", "--dump-dom", url], capture_output=True, text=True, timeout=120
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = Page(dom.stdout).body
    # 3 figures for each of the 3 runs, the seeds', the diagnostic's and the greedy ablation's
    assert body.get("data-images") == str(3 * len(RUNS) + 3) and body.get("data-broken-images") == "0", body
    shot = tmp_path / "report.png"
    subprocess.run([*flags, f"--screenshot={shot}", url], capture_output=True, timeout=120, check=True)
    with Image.open(shot) as im:
        colours = im.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50  # figures drawn, not a blank or error page
