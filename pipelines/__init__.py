"""What a build is and what publishing means: config, the Beam graph, the driver, publishing, the CLI.

`config/` turns YAML into a checked config, `graph` wires the Beam steps of
`transforms`, `runners` picks the engine, `build` drives a build, `publish/`
stages, checks, verifies and commits it, and `cli` is the `recordforge`
command. The only code that constructs a `beam.Pipeline`.
"""
