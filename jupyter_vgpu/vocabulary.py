"""The words the server and the JupyterLab extension share: each tier's name and what its slices
reserve, how another user's holder reads, where a usage figure comes from. The extension ships
them as ``labextension/src/vocabulary.json`` (its fallback when a server sends no ``share_note``);
``tests/ui/test_labextension_checks.py`` fails when that file and this module disagree, so the two cannot
drift. Regenerate it with ``python -m jupyter_vgpu.vocabulary > labextension/src/vocabulary.json``."""

from __future__ import annotations

import json
from typing import Any

from .enforcement import TIERS
from .slices.records import HIDDEN_HOLDER, HOLDER_KINDS
from .slices.usage import MEASURED, NO_USAGE, REPORTED


def vocabulary() -> dict[str, Any]:
    return {
        "tiers": {
            t.tier.value: {
                "text": t.describe(),
                "hard": t.hard,
                "share_note": t.share_note(),
                "share_note_quarter": t.share_note(0.25),  # what a 1/4 slice of it reserves
            }
            for t in TIERS
        },
        "holder_kinds": list(HOLDER_KINDS),
        "hidden_holder": dict(HIDDEN_HOLDER),
        "usage_sources": [MEASURED, REPORTED, NO_USAGE],
    }


if __name__ == "__main__":
    print(json.dumps(vocabulary(), indent=2, sort_keys=True))
