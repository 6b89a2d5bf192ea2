rule decision_rule:
    """A candidate's decision rule (metric, direction, seeds, alpha, comparison, hypothesis,
    margin) from the config, with its SHA-256; each write is appended to the history beside
    it. Every replay of the candidate waits for it (an ancient input: order only), so it is
    written before the first replay; a changed rule reruns this and the ablation, no replay.
    """
    output:
        "results/{task}/decision-rules/{candidate}.json",
    log:
        "logs/{task}/decision-rule-{candidate}.log",
    wildcard_constraints:
        candidate=r"[A-Za-z0-9_.]+",
    localrule: True
    conda:
        "../envs/replaykit.yaml"
    params:
        rule=get_decision_rule_json,
    shell:
        "python -m replaykit decision-rule --rule {params.rule:q} --out {output} > {log} 2>&1"


rule ablation:
    """Matched ablation: the candidate and the shipped recipe replayed with the same seeds,
    scored on the same final rows; per-seed differences (official, proxy-selected and last
    checkpoints), a two-stage bootstrap CI over seeds and rows, a t-interval, P(candidate
    better), the verdict under the candidate's decision rule and the power figures. The
    shipped runs are the ordinary shipped-seed<s> runs, shared by every candidate."""
    input:
        candidate=lambda w: get_ablation_officials(w, w.candidate),
        shipped=lambda w: get_ablation_officials(w, "shipped"),
        # every formal run is audited (rule audit); the ablation's runs too
        audits=lambda w: [
            str(Path(p).parent / "audit.json")
            for who in (w.candidate, "shipped")
            for p in get_ablation_officials(w, who)
        ],
        fixed_start=get_fixed_start_reference,
        decision_rule="results/{task}/decision-rules/{candidate}.json",
        stale=receipt_stamp("results/{task}/ablation/{candidate}"),
    output:
        directory("results/{task}/ablation/{candidate}"),
    log:
        "logs/{task}/ablation-{candidate}.log",
    wildcard_constraints:
        candidate=r"[A-Za-z0-9_.]+",
    conda:
        "../envs/replaykit.yaml"
    params:
        n_boot=lambda w: task_cfg(w)["final"]["n_boot"],
        row_cluster=lambda w: get_task(w.task).ROW_CLUSTER or "",
        fixed_start_scores=lambda w, input: (
            str(Path(input.fixed_start).parent) if input.fixed_start else ""
        ),
    shell:
        "python -m replaykit ablation --task {wildcards.task} --candidate {wildcards.candidate}"
        " --candidate-officials {input.candidate} --shipped-officials {input.shipped}"
        " --fixed-start-scores '{params.fixed_start_scores}' --row-cluster '{params.row_cluster}'"
        " --n-boot {params.n_boot} --decision-rule {input.decision_rule} --out-dir {output} > {log} 2>&1"
