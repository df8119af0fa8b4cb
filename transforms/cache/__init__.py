"""The build cache: what reading, checking and encoding each input file gave, kept for the next build.

Modules:

* `names`: which input file and reading unit a piece holds, and which files
  have a piece for every unit;
* `pieces`: a piece's format, written while a unit is converted and checked
  whole before it is reused;
* `steps`: `ConvertTablesWithCache`, the Beam steps that reuse a whole
  file's pieces or read, convert and cache its units.

docs/incremental.md describes the cache for users.
"""
