"""What replay did in the last capture: tests and benchmarks read :data:`STATS`."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Stats:
    """What replay did in the last capture (tests and benchmarks read :data:`STATS`)."""

    #: layers whose records were copied, in the records that stand
    replayed: int = 0
    #: groups of identical layers found before the model ran, and those with a template
    groups: int = 0
    templates: int = 0
    #: why the capture was traced again without replay ("" where it was not)
    fell_back: str = ""
    #: why a group or a call was not replayed (each reason once)
    declined: list[str] = field(default_factory=list)

    def reset(self) -> None:
        """A fresh account (one per capture)."""
        self.__dict__.update(vars(Stats()))

    def decline(self, why: str) -> None:
        if why not in self.declined:
            self.declined.append(why)


STATS = Stats()
