rule campaign:
    """A campaign (config `campaign`): every candidate of each listed task in a matched
    ablation against the shipped recipe over the task's seeds (the shipped and fixed-start
    runs shared by the task's candidates), and one summary page: per task each candidate's
    verdict, across tasks the normalised scores."""
    input:
        ablations=get_campaign_ablations,
        stale=receipt_stamp("results/campaign"),
    output:
        directory("results/campaign"),
    log:
        "logs/campaign.log",
    conda:
        "../envs/replaykit.yaml"
    shell:
        "python -m replaykit campaign --ablations {input.ablations} --out-dir {output} > {log} 2>&1"
