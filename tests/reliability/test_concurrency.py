"""Two `recordforge build` processes of the same version started at once.

Exactly one publishes; the other exits non-zero saying another build has the
version and that it published nothing; the published version is entirely
one build's (every shard verifies against its manifest, and every record
comes from that build's input). The finalize-level race, with both builds
held at the commit, is tests/pipelines/test_publish.py::
test_concurrent_finalize_publishes_exactly_one.
"""

from __future__ import annotations

import os
import subprocess
import textwrap

import pytest

from recordforge.pipelines.publish import verify
from recordforge.schemas.example import decode_example
from recordforge.transforms import tfrecord

CONFIG = textwrap.dedent("""\
    name: race
    version: "1.0.0"
    source: {{type: csv, path: {csv}}}
    features:
      id: {{type: int64}}
      who: {{type: string}}
    splits: {{train: 0.5, test: 0.5}}
    key: id
    output: {{path: {output}, shard_size: 1MB}}
    """)


@pytest.mark.slow
def test_two_builds_of_one_version_publish_exactly_one(tmp_path, cli_command):
    output = tmp_path / "out"
    commands = []
    for who in ("first", "second"):
        csv = tmp_path / f"{who}.csv"
        csv.write_text("id,who\n" + "".join(f"{i},{who}\n" for i in range(2000)))
        config = tmp_path / f"{who}.yaml"
        config.write_text(CONFIG.format(csv=csv, output=output))
        commands.append([cli_command, "build", str(config), "--",
                         "--direct_running_mode=in_memory"])
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=dict(os.environ)) for command in commands]
    results = [(process.wait(timeout=300), *process.communicate()) for process in processes]
    statuses = sorted(status for status, _, _ in results)
    assert statuses[0] == 0 and statuses[1] in (1, 2), results
    loser = next(err for status, _, err in results if status != 0)
    verdict = [line for line in loser.splitlines() if line.startswith("recordforge build:")]
    assert len(verdict) == 1, loser
    # Either it lost the commit race (1) or started after the winner had published (2).
    assert ("published nothing" in verdict[0] and "another build" in verdict[0]) or \
        "already published" in verdict[0], verdict

    report = verify.verify_dataset(str(output), deep=True)
    assert report.ok, report.problems
    version = output / "1.0.0"
    writers = {decode_example(record)["who"][1][0]
               for shard in (p for p in version.glob("*.tfrecord*") if p.suffix != ".index")
               for record in tfrecord.read_records(str(shard))}
    assert len(writers) == 1, writers  # never a mix of the two builds
    assert (output / "LATEST").read_text() == "1.0.0\n"
    assert sorted(p.name for p in (output / ".staging").iterdir()) == []
