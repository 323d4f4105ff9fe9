"""The IPython layer: connects the core to a running shell."""
