"""Where rows come from and the Beam steps they take: readers, sources, checks, shards, dead letters.

`readers/` reads input files as plain code, `sources/` wraps the readers as
Beam steps; `to_examples`, `shards` and `dead_letter_sink` are the steps a
row takes after its source. Builds on `schemas`; knows nothing of
`pipelines`. docs/DESIGN.md maps every module.
"""
