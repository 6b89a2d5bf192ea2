rule workspace:
    """Fresh copy of the shipped recipe plus the run's candidate patch (checked first)."""
    input:
        recipe=get_recipe_files,
        patch=get_patch,
        # the run's replay record names another patch than the file holds now (verify.check_run)
        stale=receipt_stamp("results/{task}/{run}/workspace.json"),
    output:
        # update(): a refused rebuild (a changed patch that no longer applies) keeps the last
        # workspace the run's replay and official result were built from (Snakemake restores it)
        workspace=update(directory("results/{task}/{run}/workspace")),
        record=update("results/{task}/{run}/workspace.json"),
    log:
        "logs/{task}/{run}/workspace.log",
    conda:
        "../envs/replaykit.yaml"
    params:
        recipe=recipe_dir,
    shell:
        "python -m replaykit workspace --recipe {params.recipe} --patch '{input.patch}'"
        " --out {output.workspace} --record {output.record} > {log} 2>&1"


checkpoint replay:
    """Formal replay under the budget. Checkpoints are published atomically next to the
    record (replay/checkpoint-N, at most 3) and outlive a failed job; the record is last.
    Progress: a line every 30 s or so on the job's stderr (the terminal, or the SLURM job's
    log; fd 3 below); all that train.py writes is in the log.
    """
    input:
        workspace="results/{task}/{run}/workspace",
        workspace_record="results/{task}/{run}/workspace.json",
        manifest="results/{task}/assets/manifest.json",
        public="results/{task}/assets/public",
        fixed_start=get_fixed_start,
        # order only (ancient): a candidate's decision rule is written before its first replay
        decision_rule=get_decision_rule,
        self_test=ancient("results/sandbox-self-test/{task}.json"),
    output:
        record="results/{task}/{run}/replay/record.json",
    log:
        "logs/{task}/{run}/replay.log",
    benchmark:
        "benchmarks/{task}/{run}/replay.tsv"
    conda:
        "../envs/replaykit.yaml"
    threads: lambda w: task_cfg(w)["threads"]
    resources:
        gpu=1,
        replays=1,  # campaign.max_replays caps these
        runtime=lambda w, attempt: attempt * get_budget(w).runtime_minutes(setup_s=120),
    params:
        budget=as_json("budget"),
        profile=lambda w: task_cfg(w)["recipe"]["profile"],
        overrides=lambda w: json.dumps(
            task_cfg(w)["recipe"]["overrides"], sort_keys=True
        ),
        seed=lambda w: parse_run(w.run)[1],
        publish_dir=replay_dir,
        state_dir=lambda w: f"results/{w.task}/{w.run}/replay-state",
        data=as_json("data"),
        sandbox=sandbox_settings,
    shell:
        "export REPLAYKIT_PROGRESS_FD=3 REPLAYKIT_LOG={log:q}; exec 3>&2;"
        " exec python -m replaykit replay --task {wildcards.task} --run {wildcards.run}"
        " --workspace {input.workspace} --workspace-record {input.workspace_record}"
        " --manifest {input.manifest} --fixed-start {input.fixed_start} --public {input.public}"
        " --publish-dir {params.publish_dir} --state-dir {params.state_dir} --record {output.record}"
        " --budget {params.budget:q} --profile {params.profile} --overrides {params.overrides:q}"
        " --seed {params.seed} --threads {threads} --data {params.data:q} --sandbox {params.sandbox:q}"
        " > {log} 2>&1"
