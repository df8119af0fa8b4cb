"""The ArrayRecord shard codec: records into an ArrayRecord file, and read back.

`output.format: array_record` writes each shard as an ArrayRecord file (the
Riegeli-based format Grain reads with random access and TFDS writes with
``--file_format=array_record``) instead of TFRecord framing. The
`array_record` package (the `array_record` extra) does the file format; it
is imported only when that format is chosen (`module`). Plain code, no
Beam; other code imports this door only, never its modules:

* `module`: the package, loaded on first use (`ArrayRecordMissing` when
  it is not installed), and the writer and reader options this project
  uses (`WRITER_OPTIONS`, `RANDOM_ACCESS_OPTIONS`);
* `sink`: `ArrayRecordSink`, the shard writer's record sink: TFRecord
  framed bytes in (every CRC checked), their records into an ArrayRecord
  file on the local disk;
* `reading`: `ArrayRecordFile`, a local ArrayRecord file opened with its
  record count, records read in bounded batches or by position, and
  `ArrayRecordError` naming the file.
"""

from .module import (FILE_FORMATS, RANDOM_ACCESS_OPTIONS, WRITER_OPTIONS, ArrayRecordMissing,
                     array_record_module, check_file_format, require_array_record)
from .reading import ArrayRecordError, ArrayRecordFile, iter_array_records
from .sink import ArrayRecordSink

__all__ = [
    "ArrayRecordError",
    "ArrayRecordFile",
    "ArrayRecordMissing",
    "ArrayRecordSink",
    "FILE_FORMATS",
    "RANDOM_ACCESS_OPTIONS",
    "WRITER_OPTIONS",
    "array_record_module",
    "check_file_format",
    "iter_array_records",
    "require_array_record",
]
