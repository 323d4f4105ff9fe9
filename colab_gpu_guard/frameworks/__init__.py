"""One small module per framework, each answering the same questions (see `base`).

No module here imports its framework at import time: each looks it up in ``sys.modules``,
and only seeding imports torch (when the user asked for it to be seeded and it is
installed). TensorFlow and JAX are never imported on the user's behalf.
"""
