"""The package in another process: notebooks in a real kernel (nbclient), fresh interpreters."""
