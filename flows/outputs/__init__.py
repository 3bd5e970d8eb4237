"""What is read out of the warehouse for the job and the commands: the report, the gate, the
comparison, queries and exports."""
