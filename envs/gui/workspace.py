"""File access for the rubric builder, confined to one working directory.

Every path the user types is resolved (symlinks included) and must stay inside the directory: ``..``,
absolute paths elsewhere and links that point out are refused. Nothing is written except by ``write_text``,
which the app calls only on an explicit save.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

RUBRIC_SUFFIXES = (".yaml", ".yml", ".json")
"""Files offered as rubrics."""
SCENARIO_SUFFIXES = (".yaml", ".yml", ".jsonl")
"""Files offered as scenarios."""


class WorkspaceError(ValueError):
    """A path is outside the working directory, or cannot be read or written."""


@dataclass(frozen=True)
class Workspace:
    """The one directory the app may read and write."""

    root: Path
    """The working directory, resolved."""

    @classmethod
    def at(cls, root: str | Path) -> Workspace:
        """A workspace at ``root`` (which must be an existing directory)."""
        path = Path(root).expanduser().resolve()
        if not path.is_dir():
            raise WorkspaceError(f"working directory {str(root)!r} is not a directory")
        return cls(path)

    def resolve(self, relative: str | Path) -> Path:
        """The absolute path of ``relative`` (or of an absolute path inside the root), links resolved;
        ``WorkspaceError`` when it leads outside the root."""
        text = str(relative).strip()
        if not text:
            raise WorkspaceError("no file name given")
        path = (self.root / text).resolve()
        if path != self.root and self.root not in path.parents:
            raise WorkspaceError(f"{text!r} is outside the working directory {self.root}")
        return path

    def relative(self, path: Path) -> str:
        """``path`` relative to the root, for display."""
        return str(path.relative_to(self.root))

    def files(self, suffixes: tuple[str, ...], limit: int = 500) -> list[str]:
        """Files under the root with one of ``suffixes`` (relative, sorted; hidden folders and virtual
        environments skipped; links leading outside left out)."""
        found: list[str] = []
        for path in sorted(self.root.rglob("*")):
            parts = path.relative_to(self.root).parts
            if any(p.startswith(".") or p in ("node_modules", "__pycache__", "runs") for p in parts):
                continue
            if path.suffix in suffixes and path.is_file():
                try:
                    self.resolve(path.relative_to(self.root))
                except WorkspaceError:
                    continue
                found.append(str(path.relative_to(self.root)))
                if len(found) >= limit:
                    break
        return found

    def read_path(self, relative: str | Path) -> Path:
        """The resolved path of an existing file inside the root."""
        path = self.resolve(relative)
        if not path.is_file():
            raise WorkspaceError(f"{str(relative)!r} does not exist in {self.root}")
        return path

    def write_path(self, relative: str | Path) -> Path:
        """The resolved path to write ``relative`` to; its folder must exist inside the root."""
        path = self.resolve(relative)
        if path == self.root or path.is_dir():
            raise WorkspaceError(f"{str(relative)!r} is a directory")
        if not path.parent.is_dir():
            raise WorkspaceError(f"folder {self.relative(path.parent)!r} does not exist")
        return path
