"""The record each kind's prose is built into (`Advice`), and the phrases several kinds
share: how to restart, what `%gpu_reset` releases, how to find the kernel that failed."""

from __future__ import annotations

from typing import NamedTuple

RESTART_SESSION = "Colab: Runtime > Restart session; Jupyter: Kernel > Restart"
NEW_RUNTIME = "Colab: Runtime > Disconnect and delete runtime, then connect again"
RESET_FIX = (
    "Run `%gpu_reset` to release what the notebook still holds (output history, the last "
    "traceback, cached GPU memory no tensor is using), then rerun."
)
# added where the advice lists the biggest leftovers (`enrich`)
DEL_LEFTOVERS = " `del` the big leftovers listed above that you no longer need."
LAUNCH_BLOCKING_FIX = (
    "To find the line that really failed, restart, make the first cell "
    "`%env CUDA_LAUNCH_BLOCKING=1` (it must be set before CUDA starts) and rerun: GPU errors "
    "are otherwise reported later, at an unrelated line."
)
INDEX_CULPRITS = (
    "Usual culprit: a class label outside [0, num_classes) for `CrossEntropyLoss` / "
    "`nll_loss` (compare `labels.min()`, `labels.max()` with the number of logits; "
    "-1 or 1-based labels are common), or an index >= `num_embeddings` in "
    "`nn.Embedding` (token ids vs vocabulary size); BCE targets outside [0, 1] also "
    "assert. Running the same step on CPU gives a readable error."
)


class Advice(NamedTuple):
    """What one kind of error means and what to do, before anything is learned from this
    process; `classify` turns it into a Diagnosis."""

    kind: str
    summary: str
    facts: dict[str, str]
    fixes: list[str]
    restart_required: bool = False
