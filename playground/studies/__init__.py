"""The tables of the measurement scripts' results (scripts/*.py --out): one module per script, each drawing the
table its script prints and docs/*.md show from the saved JSON alone. playground.experiments declares which script
writes which result and names its table here, so `report` and scripts/results_tables.py read them from the package.
A study whose measurement a CI test runs on a tiny model keeps that here as well, its script a thin entry
(constrained_speed)."""
