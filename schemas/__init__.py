"""What a row must be: the feature schema, value checks, Example encoding and dead-letter records.

Plain code, no Beam; `transforms` and `pipelines` build on it. Modules in
data-flow order: features, feature_config, values, checks, fast_paths,
row_encoder, columns, keys, example, dead_letters (errors: ConfigError).
"""
