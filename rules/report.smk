rule figures:
    """One run's figures: training curve, each checkpoint's final score against the
    references, and the budget per phase."""
    input:
        official="results/{task}/{run}/official.json",
        record="results/{task}/{run}/replay/record.json",
        final="results/{task}/final",
    output:
        training=report(
            update("results/{task}/{run}/figures/training.png"),
            caption="../report/training.rst",
            category="{task}",
            subcategory="{run}",
            labels={"figure": "training curve"},
        ),
        checkpoints=report(
            update("results/{task}/{run}/figures/checkpoints.png"),
            caption="../report/checkpoints.rst",
            category="{task}",
            subcategory="{run}",
            labels={"figure": "final score per checkpoint"},
        ),
        budget=report(
            update("results/{task}/{run}/figures/budget.png"),
            caption="../report/budget.rst",
            category="{task}",
            subcategory="{run}",
            labels={"figure": "budget use"},
        ),
    log:
        "logs/{task}/{run}/figures.log",
    conda:
        "../envs/replaykit.yaml"
    params:
        benchmarks="benchmarks/{task}/{run}",
        out_dir=lambda w, output: str(Path(output.training).parent),
    shell:
        "python -m replaykit figures --task {wildcards.task} --official {input.official}"
        " --record {input.record} --final-dir {input.final} --benchmarks {params.benchmarks}"
        " --out-dir {params.out_dir} > {log} 2>&1"


rule html_report:
    """The task's HTML report: every run's figures, each seed's official score, the task's
    diagnostic, and the checkpoint table with paired differences and lineage links."""
    input:
        final="results/{task}/final",
        officials=get_report_officials,
        figures=get_report_figures,
        ablations=get_report_ablations,
    output:
        html=update("results/{task}/report.html"),
        table=report(
            update("results/{task}/report/checkpoints.html"),
            caption="../report/table.rst",
            category="{task}",
            subcategory="all runs",
            labels={"figure": "checkpoint table"},
        ),
        seeds=report(
            update("results/{task}/report/seeds.png"),
            caption="../report/seeds.rst",
            category="{task}",
            subcategory="all runs",
            labels={"figure": "official score per seed"},
        ),
        diagnostics=report(
            update("results/{task}/report/diagnostics.png"),
            caption="../report/diagnostics.rst",
            category="{task}",
            subcategory="all runs",
            labels={"figure": "task diagnostic"},
        ),
    log:
        "logs/{task}/report.log",
    conda:
        "../envs/replaykit.yaml"
    params:
        n_boot=lambda w: task_cfg(w)["final"]["n_boot"],
        run_figures=lambda w, input: [
            str(Path(p).parent) for p in input.figures if p.endswith("training.png")
        ],
    shell:
        "python -m replaykit report --task {wildcards.task} --final-dir {input.final}"
        " --officials {input.officials} --run-figures {params.run_figures}"
        " --n-boot {params.n_boot} --out-html {output.html} --out-table {output.table}"
        " --out-seeds {output.seeds} --out-diagnostics {output.diagnostics}"
        " --ablations {input.ablations} > {log} 2>&1"
