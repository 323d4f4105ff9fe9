"""The %gpu_panel widget in a real IPython shell (fixtures in conftest.py here)."""
