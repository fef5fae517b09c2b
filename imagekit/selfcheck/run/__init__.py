"""The run: which function each check is (registry), each probe in its own process with a time
limit (processes, child), the verdict over the snapshot (judge), the report, the entry point."""
