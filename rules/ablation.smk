rule ablation:
    """Matched ablation: the candidate and the shipped recipe replayed with the same seeds,
    scored on the same final rows; per-seed differences, a two-stage bootstrap CI over seeds
    and rows, a t-interval, the verdict and the power figures. The shipped runs are the
    ordinary shipped-seed<s> runs, shared by every candidate."""
    input:
        candidate=lambda w: get_ablation_officials(w, w.candidate),
        shipped=lambda w: get_ablation_officials(w, "shipped"),
        fixed_start=get_fixed_start_reference,
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
        " --n-boot {params.n_boot} --out-dir {output} > {log} 2>&1"
