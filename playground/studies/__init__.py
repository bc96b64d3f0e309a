"""The tables of the measurement scripts' results (scripts/*.py --out): one module per script, each drawing the
table its script prints and docs/*.md show from the saved JSON alone, so scripts/results_tables.py reads them from
the package instead of importing the scripts by file path."""
