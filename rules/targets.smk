# A task target (results/<task>/final, results/<task>/report.html) for a task that is not
# configured gets one line naming the tasks, not Snakemake's MissingRuleException.
rule unknown_task:
    input:
        refuse_unknown_task,
    output:
        "results/{other}/{target}",
    wildcard_constraints:
        other="(?!(?:"
        + "|".join(map(re.escape, [*config["tasks"], "models"]))
        + ")/)[^/]+",
        target="final|report\\.html",
