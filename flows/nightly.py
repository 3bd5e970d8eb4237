"""The entrypoint prefect.yaml names for the nightly deployment (`prefect deploy --name nightly`).

A work pool's worker loads an entrypoint file as a script, where the package's own relative
imports cannot work, so this file imports the flow from the installed package by name."""

from retrieval_eval.flows.job.prefect_flows import job_flow

__all__ = ["job_flow"]
