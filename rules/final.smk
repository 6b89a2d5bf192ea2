rule official:
    """Best valid final result among the run's retained checkpoints and, beside it, the one the
    proxy ranks best (proxy_selected); a candidate's run records its decision rule."""
    input:
        record="results/{task}/{run}/replay/record.json",
        markers=get_markers,
        scores=get_final_scores,
        proxy=get_proxy_scores,
        decision_rule=get_decision_rule,
        stale=receipt_stamp("results/{task}/{run}/official.json"),
    output:
        official=update("results/{task}/{run}/official.json"),
        # its receipt: a consumer (audit, final, ablation, report) and status check it
        receipt=update("results/{task}/{run}/official.json.sha256"),
    log:
        "logs/{task}/{run}/official.log",
    conda:
        "../envs/replaykit.yaml"
    params:
        direction=lambda w: get_task(w.task).METRIC["direction"],
        score_dirs=lambda w, input: [str(Path(p).parent) for p in input.scores],
        proxy_dirs=lambda w, input: [str(Path(p).parent) for p in input.proxy],
    shell:
        "python -m replaykit official --task {wildcards.task} --run {wildcards.run}"
        " --record {input.record} --direction {params.direction} --markers {input.markers}"
        " --scores {params.score_dirs} --proxy-scores {params.proxy_dirs}"
        " --decision-rule '{input.decision_rule}' --out {output.official} > {log} 2>&1"


rule proxy:
    """Proxy scores of every retained checkpoint of a run, in one file (shown beside an
    exploration's proxy receipts)."""
    input:
        scores=get_proxy_scores,
        stale=receipt_stamp("results/{task}/{run}/proxy.json"),
    output:
        table="results/{task}/{run}/proxy.json",
        receipt="results/{task}/{run}/proxy.json.sha256",
    log:
        "logs/{task}/{run}/proxy.log",
    conda:
        "../envs/replaykit.yaml"
    params:
        score_dirs=lambda w, input: [str(Path(p).parent) for p in input.scores],
    shell:
        "python -m replaykit proxy-table --scores {params.score_dirs} --out {output.table} > {log} 2>&1"


rule final:
    """The task's official result next to its references, with report.md and .complete."""
    input:
        officials=get_officials,
        shipped=get_shipped_official,
        fixed_start=get_fixed_start_reference,
        proxy=get_exploration_proxy,
        self_test="results/sandbox-self-test/{task}.json",
        audits=get_audits,
        stale=receipt_stamp("results/{task}/final"),
    output:
        # update(): Snakemake keeps final/ (backed up) while the job builds the new one aside
        # and swaps it in; a failed job leaves the previous one as it was
        update(directory("results/{task}/final")),
    log:
        "logs/{task}/final.log",
    conda:
        "../envs/replaykit.yaml"
    params:
        published=lambda w: json.dumps(
            task_cfg(w)["references"]["published"], sort_keys=True
        ),
        n_boot=lambda w: task_cfg(w)["final"]["n_boot"],
        fixed_start_scores=lambda w, input: (
            str(Path(input.fixed_start).parent) if input.fixed_start else ""
        ),
    shell:
        "python -m replaykit final --task {wildcards.task} --officials {input.officials}"
        " --shipped-official {input.shipped} --fixed-start-scores '{params.fixed_start_scores}'"
        " --published {params.published:q} --n-boot {params.n_boot} --proxy-table '{input.proxy}'"
        " --self-test {input.self_test}"
        " --audits {input.audits} --out-dir {output} > {log} 2>&1"
