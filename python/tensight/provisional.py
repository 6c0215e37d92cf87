"""A provisional window: one written from a loop's steps is provisional until the loop has
run as many more steps (:attr:`Provisional.confirm_at`, a count of boundaries). A loop
that ends before that may only have set things up (a benchmark's data built in a loop
before the timed one): its window is then set aside (:meth:`Provisional.set_aside`: its
files renamed, its facts kept) and the collector's watch goes on; a later loop's window
replaces it; if none comes, it is put back at the end (:meth:`Provisional.take`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tensight import bundle as contract
from tensight.timing import StepTiming
from tensight.window import Window

__all__ = ["Aside", "Provisional"]

#: The files of a written window.
FILES = (contract.TRACE, contract.DETAIL, contract.EXECUTION_TRACE)


@dataclass
class Aside:
    """A written window set aside, with its timing and the program iteration its first
    step boundary ended."""

    window: Window
    timing: StepTiming
    first_index: int


class Provisional:
    """The provisional window of the bundle `bundle`."""

    def __init__(self, bundle: Path) -> None:
        self.bundle = bundle
        self.confirm_at: int | None = None
        self.aside: Aside | None = None

    def confirmed(self, count: int) -> bool:
        """Whether boundary `count` confirms the window (its loop went on as long again)."""
        return self.confirm_at is not None and count >= self.confirm_at

    def set_aside(self, aside: Aside) -> None:
        """Keep the written window (files renamed) while the collector starts over."""
        self.drop()
        for name in FILES:
            f = self.bundle / name
            if f.exists():
                f.replace(self.bundle / (name + ".aside"))
        self.aside = aside
        self.confirm_at = None

    def drop(self) -> None:
        """Drop the window set aside, if any (a later window replaces it)."""
        if self.aside is None:
            return
        self.aside = None
        for name in FILES:
            contract.remove(self.bundle / (name + ".aside"))

    def take(self) -> Aside | None:
        """The window set aside, if any, no longer set aside (its files are put back by
        :meth:`put_back`)."""
        aside, self.aside = self.aside, None
        return aside

    def put_back(self) -> None:
        for name in FILES:
            f = self.bundle / (name + ".aside")
            if f.exists():
                f.replace(self.bundle / name)
