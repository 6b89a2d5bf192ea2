# Replays machine-learning research tasks reproducibly: fixed assets -> formal replay under
# a budget -> published checkpoints -> frozen validation -> final scores with receipts ->
# the official result. See README.md; the contract is docs/contract.md.
from snakemake.utils import min_version

min_version("9.21")  # 9.16.3-9.20.0 misread CLI/profile runtimes as seconds


configfile: "config/config.yaml"


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/assets.smk"
include: "rules/replay.smk"
include: "rules/sandbox.smk"
include: "rules/evaluate.smk"
include: "rules/final.smk"
include: "rules/audit.smk"
include: "rules/ablation.smk"
include: "rules/campaign.smk"
include: "rules/report.smk"
include: "rules/targets.smk"


rule all:
    default_target: True
    input:
        expand("results/{task}/final", task=sorted(config["tasks"])),
        expand("results/{task}/report.html", task=sorted(config["tasks"])),
