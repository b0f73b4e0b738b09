"""What a source reports when it skips or adjusts one object instead of failing as a whole."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class SourceWarning:
    """One object a source could not use as given.

    ``kind`` is the Kubernetes kind (``Pod``, ``Queue``, ``PodGroup``, ...) or a resource name for source-level
    problems (``podgroups.scheduling.run.ai``); ``field`` is the path inside the object
    (``metadata.annotations.gpu-fraction``). ``skipped`` says whether the object was left out of the snapshot
    (``True``) or kept with a correction (``False``).
    """

    kind: str
    namespace: Optional[str]
    name: Optional[str]
    field: Optional[str]
    message: str
    skipped: bool = True

    @property
    def object_ref(self) -> str:
        """``Kind ns/name`` (or ``Kind name`` for cluster-scoped objects)."""
        if self.name is None:
            return self.kind
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"

    def __str__(self) -> str:
        where = self.object_ref + (f" field {self.field}" if self.field else "")
        if self.name is None:  # a source-level problem (a whole resource type), not one object
            return f"{where}: {self.message}"
        return f"{where}: {self.message} ({'skipped' if self.skipped else 'adjusted'})"
