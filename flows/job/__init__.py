"""The job: the one loop (job.py) over its plan (plan.py) and steps (run_steps.py), run in
process or as Prefect tasks (prefect_flows.py, prefect_settings.py), with its progress lines."""
