"""What the timer is used for beyond one run: the planner that ranks strategies (``planner``),
the published measurements (``published``), their prediction side by side (``validate``) and
the waterfall from the paper's ideal ring to a real one (``waterfall``)."""
