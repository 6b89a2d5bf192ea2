"""The HTML report on a tiny dpo run: a candidate patch over two seeds plus the shipped
reference, so the report holds three runs. Numbers in the page are compared with the
summaries they come from; the page is opened in headless Chromium."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import config_patch, copy_workflow, snakemake, tiny_config, write_config

pytestmark = pytest.mark.slow
REPORT = "results/dpo/report.html"
RUNS = ("beta05-seed42", "beta05-seed43", "shipped-seed42")


def read(path):
    return json.loads(Path(path).read_text())


class Page(HTMLParser):
    """Collects the checkpoint table's rows (their attributes and the data-value of each
    cell), the images and the links of a report page."""

    def __init__(self, text: str):
        super().__init__()
        self.rows, self.images, self.links, self.body = [], [], [], {}
        self.headline = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and "data-run" in a:
            self.rows.append({"run": a["data-run"], "progress": int(a["data-progress"]), "cells": {}})
        elif tag == "td" and self.rows and "class" in a and "data-value" in a:
            self.rows[-1]["cells"][a["class"].split()[-1]] = a
        elif tag == "span" and a.get("class") == "value":
            self.headline = float(a["data-value"])
        elif tag == "img":
            self.images.append(a["src"])
        elif tag == "a":
            self.links.append(a["href"])
        elif tag == "body":
            self.body = a


@pytest.fixture(scope="module")
def two_seeds(tiny_llama, tmp_path_factory):
    work = copy_workflow(tmp_path_factory.mktemp("report-run"))
    patch = config_patch(work, "beta05", "beta", "0.5")
    cfg = tiny_config(tiny_llama, candidate="beta05", candidates={"beta05": str(patch)}, seeds=[42, 43])
    # 3 steps, checkpoints at 2 and 3 (the last step always publishes): 2 x 3 scoring jobs per run
    cfg["tasks"]["dpo"]["recipe"]["overrides"].update(max_steps=3, save_steps=2)
    write_config(work, cfg)
    snakemake(work, REPORT, "--cores", "2", "--resources", "gpu=1", check=True)
    return work, patch


def test_candidate_patch_over_two_seeds(two_seeds):
    from replaykit.harness.hashing import sha256_file

    work, patch = two_seeds
    final = read(work / "results/dpo/final/summary.json")
    officials = [read(work / f"results/dpo/beta05-seed{s}/official.json") for s in (42, 43)]
    values = [o["official"]["value"] for o in officials]
    assert final["seeds"]["n"] == 2
    assert final["seeds"]["mean"] == pytest.approx(statistics.mean(values))
    assert final["seeds"]["sd"] == pytest.approx(statistics.stdev(values))
    assert final["value"] == values[0] and final["official"]["run"] == "beta05-seed42"
    assert final["lineage"]["patch_sha256"] == sha256_file(patch)
    assert "beta: 0.5" in (work / "results/dpo/beta05-seed42/workspace/configs/embedded.yaml").read_text()
    # the shipped reference is the unpatched recipe, replayed with the first seed
    shipped = read(work / "results/dpo/shipped-seed42/official.json")
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
    final = read(work / "results/dpo/final/summary.json")
    assert page.headline == final["value"]
    expected = [(run, c) for run in RUNS for c in read(work / f"results/dpo/{run}/official.json")["checkpoints"]]
    retained = [(run, p) for run in RUNS for p in read(work / f"results/dpo/{run}/replay/record.json")["retained"]]
    assert [(r["run"], r["progress"]) for r in page.rows] == [(run, c["progress"]) for run, c in expected] == retained
    for row, (_run, c) in zip(page.rows, expected):
        score = row["cells"]["score"]
        assert float(score["data-value"]) == c["value"] and float(score["data-se"]) == c["se"]
        # each checkpoint's own score summary holds the same number
        assert read(work / c["scores"] / "summary.json")["value"] == c["value"]
    official = next(
        r for r in page.rows if (r["run"], r["progress"]) == ("beta05-seed42", final["official"]["progress"])
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
        and r["progress"] == read(work / "results/dpo/shipped-seed42/official.json")["official"]["progress"]
    )
    assert float(shipped_best["cells"]["diff"]["data-value"]) == 0.0  # the reference against itself


def test_report_embeds_every_figure_and_links_resolve(two_seeds):
    from PIL import Image

    work, _ = two_seeds
    page = Page((work / REPORT).read_text())
    pngs = [
        work / f"results/dpo/{run}/figures/{kind}.png" for run in RUNS for kind in ("training", "checkpoints", "budget")
    ]
    pngs += [work / "results/dpo/report/seeds.png", work / "results/dpo/report/diagnostics.png"]
    assert len(page.images) == len(pngs)
    import base64

    for src, png in zip(page.images, pngs):
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]) == png.read_bytes()
        with Image.open(png) as im:
            assert im.format == "PNG" and im.width > 300 and im.height > 150
    for href in page.links:
        assert (work / "results/dpo" / href).resolve().exists(), href
    # the training curve comes from the replay record (one entry per optimizer step)
    history = read(work / "results/dpo/beta05-seed42/replay/record.json")["train_history"]
    assert [h["progress"] for h in history] == [1, 2, 3] and all("loss" in h for h in history)


def test_snakemake_report_collects_the_annotated_outputs(two_seeds):
    work, _ = two_seeds
    out = work / "snakemake-report.html"
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
    assert body.get("data-images") == "11" and body.get("data-broken-images") == "0", body
    shot = tmp_path / "report.png"
    subprocess.run([*flags, f"--screenshot={shot}", url], capture_output=True, timeout=120, check=True)
    with Image.open(shot) as im:
        colours = im.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50  # figures drawn, not a blank or error page
