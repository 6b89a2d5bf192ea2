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


# Checked once every rule is known: a target no rule makes gets one line listing the target
# forms, instead of Snakemake's MissingRuleException.
# Only a message reads the targets here (Snakemake's own parse of the command line, so that an
# option's value such as `--report results/x.html` is no target): those under results/ (nothing
# is removed or rebuilt because of them). A target under a task that is not configured is
# refused here too, before the receipts are re-verified, so that a refused command changes nothing.
if workflow.is_main_process:
    _named = [
        a
        for a in get_argument_parser().parse_known_args(sys.argv[1:])[0].targets
        if a.startswith("results/") or os.path.isabs(a) and "/results/" in a
    ]
    for _target in _named:
        _parts = Path(os.path.relpath(os.path.abspath(_target))).parts
        if (
            len(_parts) > 2
            and _parts[0] == "results"
            and _parts[1] not in [*config["tasks"], "models", "sandbox-self-test"]
        ):
            refuse_unknown_task(SimpleNamespace(other=_parts[1]))
    refuse_unknown_targets(_named)
    if not OTHER_INSTANCE:
        # an update() output whose job a kill interrupted: its last finished version back
        put_back_interrupted(
            Path(".snakemake/backups"),
            [
                re.compile(regex_from_filepattern(str(f)))
                for r in workflow.rules
                for f in r.output
                if is_flagged(f, "update")
            ],
            say=lambda line: print(line, file=sys.stderr),
        )
        reverify(*receipt_scope(), say=lambda line: print(line, file=sys.stderr))
