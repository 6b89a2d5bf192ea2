rule audit:
    """The run's boundary review (docs/audit.md): task defect, protocol exposure, agent
    behaviour and platform, each a verdict with its evidence and every check listed."""
    input:
        official="results/{task}/{run}/official.json",
        record="results/{task}/{run}/replay/record.json",
        workspace_record="results/{task}/{run}/workspace.json",
        manifest="results/{task}/assets/manifest.json",
        hidden="results/{task}/assets/hidden",
        shipped=get_shipped_official,
        fixed_start=get_fixed_start_reference,
        sidecar=get_exploration_sidecar,
        stale=receipt_stamp("results/{task}/{run}/audit.json"),
    output:
        audit="results/{task}/{run}/audit.json",
        receipt="results/{task}/{run}/audit.json.sha256",
    log:
        "logs/{task}/{run}/audit.log",
    conda:
        "../envs/replaykit.yaml"
    params:
        data=as_json("data"),
        sandbox=sandbox_settings,
        fixed_start_scores=lambda w, input: (
            str(Path(input.fixed_start).parent) if input.fixed_start else ""
        ),
    shell:
        "python -m replaykit audit {wildcards.task} {wildcards.run} --out {output.audit}"
        " --data {params.data:q} --sandbox {params.sandbox:q} --shipped-official {input.shipped}"
        " --fixed-start-scores '{params.fixed_start_scores}' > {log} 2>&1"
