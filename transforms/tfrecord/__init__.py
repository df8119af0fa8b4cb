"""The TFRecord file codec: framing, gzip members, a writer, and a damage-checking reader.

Plain code, no Beam: the Beam steps that write shards call its batch
functions, so no hot path pays per-record Python overhead twice. Other code
imports this door only, never its modules:

* `framing`: a record's bytes (length header, masked CRC32Cs), `FRAMING`,
  `TFRecordError`;
* `gzip_members`: deterministic gzip members (stored when deflate barely
  shrinks the data), written whole or streamed, and gunzipped back;
* `writer`: `TFRecordWriter`, the compressions a file may have, its suffix;
* `damage`: the intact records at a buffer's head (`complete_records`),
  and `RecordStreamCheck`,
  which checks a stream as it is written exactly as the reader would;
* `reading`: records read, viewed or counted, every CRC checked; a long
  record given in pieces (`StreamedRecord`) to readers that ask for it;
* `index`: a file's index (``"<offset> <framed length>"`` lines, the format
  DALI and the `tfrecord` package read), made as its bytes are written, and
  an index file compared with its shard's records.
"""

from .damage import RecordStreamCheck, complete_records
from .framing import (FOOTER_SIZE, FRAMING, HEADER_SIZE, MAX_RECORD_BYTES, TFRecordError,
                      crc32c, frame_records, masked_crc32c)
from .gzip_members import DEFAULT_GZIP_LEVEL, GzipStream, gzip_compress
from .index import INDEX_LINE_LIMIT, IndexMatch, RecordIndexer, index_line, indexable
from .reading import (StreamedRecord, count_records, iter_record_runs, iter_record_views,
                      iter_records, read_records)
from .writer import COMPRESSIONS, TFRecordWriter, check_compression, suffix_for

__all__ = [
    "COMPRESSIONS",
    "DEFAULT_GZIP_LEVEL",
    "FOOTER_SIZE",
    "FRAMING",
    "GzipStream",
    "INDEX_LINE_LIMIT",
    "IndexMatch",
    "HEADER_SIZE",
    "MAX_RECORD_BYTES",
    "RecordIndexer",
    "RecordStreamCheck",
    "StreamedRecord",
    "TFRecordError",
    "TFRecordWriter",
    "check_compression",
    "complete_records",
    "count_records",
    "crc32c",
    "frame_records",
    "gzip_compress",
    "index_line",
    "indexable",
    "iter_record_runs",
    "iter_record_views",
    "iter_records",
    "masked_crc32c",
    "read_records",
    "suffix_for",
]
