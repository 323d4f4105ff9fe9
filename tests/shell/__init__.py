"""Tests in a real IPython shell (the `ip`, `run_cell`, `shell` fixtures): magics, cells, hooks."""
