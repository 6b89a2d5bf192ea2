rule sandbox_self_test:
    """The sandbox's self-test for the task's isolation plan: a canary, run as a replay's
    train.py is, tries every known escape (the final split by path, through /proc and as copies
    outside the working directory, final package data, writes into the frozen code, network,
    host Unix sockets) against real targets the step plants outside the sandbox, and the limits.
    The replays and the scoring wait for it (ancient: its re-run re-runs neither); final/ and
    the reports carry its verdicts; a failed self-test stops them with one line naming the
    escape. Re-run when the frozen code, bubblewrap's version, the host, the task's data or the
    isolation keys change
    (docs/operations.md, "The sandbox's self-test")."""
    input:
        frozen="results/frozen-code.json",
        public="results/{task}/assets/public",
        hidden="results/{task}/assets/hidden",
        fixed_start=get_fixed_start,
        stale=receipt_stamp("results/sandbox-self-test/{task}.json"),
    output:
        self_test="results/sandbox-self-test/{task}.json",
        # its receipt: final/ reads the self-test only through it, status checks it
        receipt="results/sandbox-self-test/{task}.json.sha256",
    log:
        "logs/sandbox-self-test/{task}.log",
    conda:
        "../envs/replaykit.yaml"
    params:
        sandbox=sandbox_settings,
        bwrap=lambda w: SANDBOX_VERSION,
        host=lambda w: SANDBOX_HOST,
        data=as_json("data"),
    shell:
        "python -m replaykit self-test --task {wildcards.task} --fixed-start {input.fixed_start}"
        " --public {input.public} --data {params.data:q} --sandbox {params.sandbox:q}"
        " --out {output.self_test} > {log} 2>&1"
