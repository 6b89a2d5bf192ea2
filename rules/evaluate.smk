rule frozen_code:
    """SHA-256 of every file of the frozen package; validation and scoring verify against it."""
    input:
        frozen_package_files,
    output:
        "results/frozen-code.json",
    log:
        "logs/frozen-code.log",
    conda:
        "../envs/replaykit.yaml"
    shell:
        "python -m replaykit frozen-code --out {output} > {log} 2>&1"


rule validate:
    """Frozen loader's verdict on one retained checkpoint (never fails on a bad one)."""
    input:
        # not the record: a record rewritten for the same checkpoints (a replay rerun after it
        # was lost) must not re-validate them; the marker carries the record's hash instead
        checkpoint="results/{task}/{run}/replay/checkpoint-{progress}",
        fixed_start=get_fixed_start,
        frozen="results/frozen-code.json",
        stale=receipt_stamp(
            "results/{task}/{run}/validation/checkpoint-{progress}.json"
        ),
    output:
        marker="results/{task}/{run}/validation/checkpoint-{progress}.json",
    log:
        "logs/{task}/{run}/validate-{progress}.log",
    benchmark:
        "benchmarks/{task}/{run}/validate-{progress}.tsv"
    conda:
        "../envs/replaykit.yaml"
    threads: lambda w: task_cfg(w)["threads"]
    resources:
        gpu=1,
        runtime=lambda w, attempt: attempt * task_cfg(w)["validation"]["runtime"],
    params:
        cfg=as_json("validation"),
        record=lambda w: f"{replay_dir(w)}/record.json",
    shell:
        "OMP_NUM_THREADS={threads} python -m replaykit validate --task {wildcards.task}"
        " --checkpoint {input.checkpoint} --fixed-start {input.fixed_start} --cfg {params.cfg:q}"
        " --record {params.record} --frozen {input.frozen} --out {output.marker} > {log} 2>&1"


rule score:
    """Frozen evaluator on the final (hidden) split, or on the public proxy split (never mixed
    with final numbers): summary.json, rows.jsonl, then .complete."""
    input:
        marker="results/{task}/{run}/validation/checkpoint-{progress}.json",
        checkpoint="results/{task}/{run}/replay/checkpoint-{progress}",
        fixed_start=get_fixed_start,
        split=split_dir,  # final: results/{task}/assets/hidden; proxy: results/{task}/assets/public
        manifest="results/{task}/assets/manifest.json",
        frozen="results/frozen-code.json",
        self_test=ancient("results/sandbox-self-test/{task}.json"),
        stale=receipt_stamp(
            "results/{task}/{run}/{split}-scores/checkpoint-{progress}/summary.json"
        ),
    output:
        summary="results/{task}/{run}/{split}-scores/checkpoint-{progress}/summary.json",
        receipt="results/{task}/{run}/{split}-scores/checkpoint-{progress}/.complete",
    log:
        "logs/{task}/{run}/score-{split}-{progress}.log",
    benchmark:
        "benchmarks/{task}/{run}/score-{split}-{progress}.tsv"
    conda:
        "../envs/replaykit.yaml"
    threads: lambda w: task_cfg(w)["threads"]
    resources:
        gpu=1,
        runtime=lambda w, attempt: attempt * task_cfg(w)["evaluation"]["runtime"],
    params:
        cfg=as_json("evaluation"),
        items_file=lambda w: f"results/{w.task}/assets/{split_items(w)}",
        out_dir=lambda w, output: str(Path(output.summary).parent),
    shell:
        "OMP_NUM_THREADS={threads} python -m replaykit score --task {wildcards.task} --split {wildcards.split}"
        " --frozen {input.frozen} --checkpoint {input.checkpoint} --marker {input.marker}"
        " --fixed-start {input.fixed_start} --manifest {input.manifest} --items {params.items_file}"
        " --cfg {params.cfg:q} --workspace results/{wildcards.task}/{wildcards.run}/workspace"
        " --out-dir {params.out_dir} > {log} 2>&1"


rule reference_fixed_start:
    """Fixed-start reference: the final protocol applied to the fixed start itself (for soup,
    its best ingredient on the public proxy split)."""
    input:
        fixed_start=get_fixed_start,
        public=get_reference_public,
        hidden="results/{task}/assets/hidden",
        manifest="results/{task}/assets/manifest.json",
        frozen="results/frozen-code.json",
        stale=receipt_stamp(
            "results/{task}/reference/fixed-start/final-scores/summary.json"
        ),
    output:
        summary="results/{task}/reference/fixed-start/final-scores/summary.json",
        receipt="results/{task}/reference/fixed-start/final-scores/.complete",
    log:
        "logs/{task}/reference-fixed-start.log",
    benchmark:
        "benchmarks/{task}/reference-fixed-start.tsv"
    conda:
        "../envs/replaykit.yaml"
    threads: lambda w: task_cfg(w)["threads"]
    resources:
        gpu=1,
        runtime=lambda w, attempt: attempt * task_cfg(w)["evaluation"]["runtime"],
    params:
        cfg=as_json("evaluation"),
        items_file=lambda w: f"results/{w.task}/assets/{split_items(w, 'final')}",
    shell:
        "OMP_NUM_THREADS={threads} python -m replaykit score --task {wildcards.task} --split final --frozen {input.frozen}"
        " --fixed-start {input.fixed_start} --manifest {input.manifest} --items {params.items_file}"
        " --cfg {params.cfg:q} --public '{input.public}' --out-dir results/{wildcards.task}/reference/fixed-start/final-scores"
        " > {log} 2>&1"
