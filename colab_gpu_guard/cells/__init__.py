"""The per-cell engine and every judgement about a cell: what each cell kept and peaked at
(`tracker`), reruns that keep memory again and what holds it, past-leak notes, the
history's text, the NVML sampler, the output warning, failed runs and host noise. Nothing
is imported here: `%load_ext` imports only what the per-cell hooks need."""
