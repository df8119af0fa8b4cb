"""Where rows come from: listing, planning and reading input files, as plain code (no Beam).

Modules in data-flow order:

* `listing`: which files a source reads (the one rule, used by the build and
  by the config checks);
* `tables`: table files in units of work (byte ranges, row-group spans), the
  registry of table formats, a file's columns before a run;
* `ranges`: record boundaries and line cursors over byte ranges;
* `csv`, `jsonl`, `parquet`: one reader per table format;
* `labels`: labels tables (file -> label) for image sources;
* `image_items`: image sources in units of work (labelled batches of files);
* `images`: image checks and optional resizing/re-encoding;
* `common`: opening files, display names, the dead letters of reading;
* `rows`: what every reader gives, `SourceRow` and `ColumnBatch`.

Every reader yields, in file order, a `SourceRow` (or a `ColumnBatch` of
them) for every good row and a dead-letter dict (stage ``read``) for every
row it cannot read, so counting what a reader yields counts the input's
rows. The Beam steps over these are in `transforms.sources`.
"""
