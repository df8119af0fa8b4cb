"""Published versions read by training frameworks: the framework-free core of `recordforge.torch` and `recordforge.grain`.

`version` (a version opened, a split's shards and index files) ->
`index_files` (an index file checked: record offsets) -> `records` (records
streamed or read by index, every check made) -> `decode` (an Example ->
numpy values by the manifest) -> `permutation`, `plan` (equal shares per
rank, worker slices, deterministic shuffles) -> `split_reader`
(`SplitReader`: a rank's rows, resumable; `loader_position`: a
DataLoader's position from its batches) and `record_source`
(`RecordSource`: random access). `recordforge.torch` and
`recordforge.grain` (``frameworks/``) wrap them for their framework.
"""

from .decode import ExampleDecoder, RecordDecodeError
from .record_source import NoIndexFiles, RecordSource
from .split_reader import SplitReader
from .version import open_version

__all__ = ["ExampleDecoder", "NoIndexFiles", "RecordDecodeError", "RecordSource",
           "SplitReader", "open_version"]
