"""Whole jobs, as the command line runs them and Python calls them: ``train`` (a run directory
made and locked, the profiler's choice, the seeds trained, the run loaded back), ``profile``,
``bench_budgets`` and ``export``. Each resolves the user's request into a plan
(edgegcl.jobs.plan), checked before torch loads, then executes it; the command line only
parses flags and calls them. Importing this
package loads nothing else.
"""
