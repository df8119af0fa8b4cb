"""Real object stores, real clients: build, verify and inspect with the
output on s3:// (s3fs against a moto server) and gs:// (gcsfs against
fake-gcs-server), reached through the clients' own endpoint variables.

Each build's requests are counted from the server's side (moto's request
recording, fake-gcs-server's access log) and printed by type; the figures
are in configs/runners/README.md.
"""

from __future__ import annotations

import hashlib
import json
import pathlib

import fsspec
import pytest
import yaml

pytestmark = pytest.mark.slow

REPO = pathlib.Path(__file__).resolve().parents[2]
FLOWERS = REPO / "configs" / "examples" / "flowers.yaml"


@pytest.fixture(scope="module")
def local_digests(tmp_path_factory, support):
    out = tmp_path_factory.mktemp("local") / "flowers"
    support.run_recordforge("build", FLOWERS, "--output", out, env=support.base_env())
    return support.digests(fsspec.filesystem("file"), str(out / "1.0.0"))


def _report(label: str, counts: dict[str, int], capsys) -> None:
    with capsys.disabled():
        print(f"\n{label}: {sum(counts.values())} requests: "
              + ", ".join(f"{kind} {n}" for kind, n in counts.items()))


@pytest.fixture(params=["s3", "gs"])
def store(request, support):
    """(server, URL of a fresh bucket) for each object store."""
    server = request.getfixturevalue("moto" if request.param == "s3" else "fake_gcs")
    # The test's name, shortened to fit a bucket name, plus a digest of the
    # whole name: two tests whose names end alike must not share a bucket.
    name = request.node.name.split("[")[0]
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    bucket = f"rf-{name[-20:].replace('_', '-')}-{digest}-{request.param}"
    server.create_bucket(bucket)
    return request.param, server, f"{request.param}://{bucket}"


def test_build_verify_inspect_on_an_object_store(store, local_digests, support, capsys):
    scheme, server, bucket = store
    env = support.base_env(**server.env)
    output = f"{bucket}/datasets/flowers"

    mark = server.mark()
    built = support.run_recordforge("build", FLOWERS, "--output", output, env=env)
    build_requests = server.requests_since(mark)
    assert f"output: {output}/1.0.0" in built.stdout + built.stderr

    fs = server.filesystem()
    root = output.split("://", 1)[1]
    assert fs.cat_file(f"{root}/LATEST").decode().strip() == "1.0.0"
    assert support.digests(fs, f"{root}/1.0.0") == local_digests
    # Nothing but the published version, LATEST and an empty staging area.
    leftovers = [p for p in fs.find(root) if not p.startswith((f"{root}/1.0.0/",
                                                               f"{root}/LATEST"))]
    assert leftovers == [], leftovers

    mark = server.mark()
    support.run_recordforge("verify", output, "--deep", env=env)
    verify_requests = server.requests_since(mark)

    mark = server.mark()
    shown = support.run_recordforge("inspect", output, "--limit", "3", env=env)
    inspect_requests = server.requests_since(mark)
    records = [json.loads(line) for line in shown.stdout.splitlines() if line.startswith("{")]
    assert len(records) == 3 and all("label" in r.get("features", r) for r in records)

    mark = server.mark()
    support.run_recordforge("build", FLOWERS, "--output", output, "--overwrite", env=env)
    overwrite_requests = server.requests_since(mark)
    assert support.digests(fs, f"{root}/1.0.0") == local_digests

    counts = {name: support.count_by_type(found) for name, found in (
        ("build", build_requests), ("verify --deep", verify_requests),
        ("inspect", inspect_requests), ("build --overwrite", overwrite_requests))}
    for name, by_type in counts.items():
        _report(f"{scheme} {name}", by_type, capsys)
    manifest = json.loads(fs.cat_file(f"{root}/1.0.0/manifest.json"))
    published = len(support.digests(fs, f"{root}/1.0.0")) + 3  # + manifest, SHA256SUMS, report
    assert manifest["num_input_rows"] == 98
    # A build's requests are a small multiple of the files it publishes; a
    # regression that lists or polls per row or per shard pair shows here.
    assert sum(counts["build"].values()) < 60 * published, counts["build"]
    assert sum(counts["verify --deep"].values()) < 10 * published, counts["verify --deep"]
    # Shards are checked as they are written, not read back by the build
    # (which would move the dataset once more): it reads only the first
    # records of the first shard, for report.html's thumbnails. `verify`
    # reads every shard.
    shards = [shard["file"] for split in manifest["splits"].values()
              for shard in split["shards"]]
    assert len(shards) > 1
    for requests in (build_requests, overwrite_requests):
        assert _shards_read(requests, shards) == {shards[0]}
    assert _shards_read(verify_requests, shards) == set(shards)


def _shards_read(requests: list[tuple[str, str]], shards: list[str]) -> set[str]:
    return {name for kind, url in requests if kind in ("GetObject", "objects.get (media)")
            for name in shards if name in url}


def test_a_shard_replaced_after_its_writer_checked_it_is_found(store, support):
    """What publishing checks instead of reading a shard back: the object
    is still the one its writer checked (S3 ETag, GCS generation). One that
    is not is read back: a replacement of the same size is found by its
    sha256, a rewrite of the same bytes (a retried writer) passes."""
    from recordforge.pipelines.publish.file_checks import check_stored
    from recordforge.transforms import tfrecord
    from recordforge.transforms.writer import shard_files

    scheme, server, bucket = store
    server.filesystem()  # the clients' endpoint variables, for this process too
    records = [b"%05d" % n for n in range(100)]
    data = tfrecord.frame_records(records)

    def write(out) -> int:
        out.write(data)
        return len(records)

    staging = f"{bucket}/staging"
    shard = shard_files.publish_shard("s.tfrecord", write, staging_dir=staging,
                                      temp_dir=f"{staging}/_tmp", compression="none")
    assert shard.fingerprint["size"] == len(data) and len(shard.fingerprint) == 3
    url = f"{staging}/s.tfrecord"
    expected = dict(stored=shard.fingerprint, compression="none", expected_size=len(data),
                    expected_sha256=shard.sha256, expected_records=len(records))
    assert check_stored(url, "s.tfrecord", **expected).problems == []
    same_size = tfrecord.frame_records([b"%05d" % (n + 1) for n in range(100)])
    assert len(same_size) == len(data)
    fs, path = fsspec.core.url_to_fs(url)
    fs.pipe_file(path, same_size)
    [problem] = check_stored(url, "s.tfrecord", **expected).problems
    assert problem.code == "sha256", problem
    fs.pipe_file(path, data)  # the same bytes again, as a retried writer writes them
    assert check_stored(url, "s.tfrecord", **expected).problems == []


def test_a_table_build_reuses_its_cache_on_an_object_store(store, support, tmp_path, capsys):
    """The build cache on s3:// or gs:// beside the output: a second build
    of unchanged inputs reads no input row again, a changed file is read
    again, and the shards equal a local build's."""
    scheme, server, bucket = store
    env = support.base_env(**server.env)
    output = f"{bucket}/datasets/trips"
    config = support.write_table(tmp_path, 3000, output=output)
    (tmp_path / "local").mkdir()
    local = support.write_table(tmp_path / "local", 3000, output=str(tmp_path / "local-out"))
    fs = server.filesystem()
    root = output.split("://", 1)[1]

    def manifest():
        return json.loads(fs.cat_file(f"{root}/1.0.0/manifest.json"))

    support.run_recordforge("build", str(config), env=env)
    first = manifest()["cache"]
    assert first["units_converted"] >= 1 and first["units_reused"] == 0
    mark = server.mark()
    support.run_recordforge("build", str(config), "--overwrite", env=env)
    again = support.count_by_type(server.requests_since(mark))
    second = manifest()["cache"]
    assert second["units_reused"] == first["units_converted"] and second["rows_converted"] == 0
    _report(f"{scheme} build --overwrite from the cache", again, capsys)
    support.run_recordforge("build", str(local), env=support.base_env())
    def shards(found: dict) -> dict:  # dead letters name their source file, which differs
        return {name: digest for name, digest in found.items() if ".tfrecord" in name}

    assert shards(support.digests(fs, f"{root}/1.0.0")) == shards(support.digests(
        fsspec.filesystem("file"), str(tmp_path / "local-out" / "1.0.0")))


def test_key_ordered_bounds_are_sampled_from_tables_on_the_store(store, support, tmp_path):
    """A key-ordered plain build on a distributed runner reads the first
    rows of its tables from the driver (`pipelines.key_sample`): the same
    bounds from s3:// or gs:// as from the local copy."""
    import recordforge
    from recordforge.pipelines.graph import known_vocabularies
    from recordforge.pipelines.key_sample import sample_bucket_bounds
    from recordforge.transforms.writer import ShardTuning

    _, server, bucket = store
    config_path = support.write_table(tmp_path, 3000, shuffle=False)
    fs = server.filesystem()  # also sets the client's endpoint variable
    root = bucket.split("://", 1)[1]
    (tmp_path / "tables").mkdir()
    for index in range(3):  # three files, so that several are sampled
        (tmp_path / "tables" / f"part-{index}.csv").write_bytes((tmp_path / "trips.csv")
                                                                 .read_bytes())
        fs.put_file(str(tmp_path / "trips.csv"), f"{root}/tables/part-{index}.csv")
    text = yaml.safe_load(config_path.read_text())

    def reading(path: str):
        return recordforge.load_config({**text, "source": {**text["source"], "path": path}})

    local, remote = reading(str(tmp_path / "tables")), reading(f"{bucket}/tables")
    tuning = ShardTuning(hash_buckets=16)
    bounds = sample_bucket_bounds(remote, known_vocabularies(remote), tuning)
    assert bounds == sample_bucket_bounds(local, known_vocabularies(local), tuning)
    assert len(bounds) == 16


def test_array_record_output_on_an_object_store(store, support, tmp_path):
    """``output.format: array_record`` on a store: each shard is written on
    the local disk and copied into place, the same bytes as a local build;
    verify --deep reads them back through local copies, Grain's RecordSource
    reads every record from checked local copies, and a truncated shard
    fails verify, named."""
    pytest.importorskip("array_record.python.array_record_module")
    import recordforge.grain

    scheme, server, bucket = store
    env = support.base_env(**server.env)
    options = ["--set", "output.format=array_record", "--set", "output.compression=none"]
    local = tmp_path / "flowers"
    support.run_recordforge("build", FLOWERS, "--output", local, *options,
                            env=support.base_env())
    output = f"{bucket}/datasets/flowers-array-record"
    support.run_recordforge("build", FLOWERS, "--output", output, *options, env=env)
    fs = server.filesystem()  # the clients' endpoint variables, for this process too
    root = output.split("://", 1)[1]
    expected = support.digests(fsspec.filesystem("file"), str(local / "1.0.0"))
    assert any(name.endswith(".array_record") for name in expected)
    assert support.digests(fs, f"{root}/1.0.0") == expected
    manifest = json.loads(fs.cat_file(f"{root}/1.0.0/manifest.json"))
    assert manifest["file_format"] == "array_record"
    support.run_recordforge("verify", output, "--deep", env=env)

    source = recordforge.grain.RecordSource(output, "train")
    labels = [int(source[i]["label"]) for i in range(len(source))]
    assert len(labels) == manifest["splits"]["train"]["num_examples"]

    shard = manifest["splits"]["train"]["shards"][0]["file"]
    data = fs.cat_file(f"{root}/1.0.0/{shard}")
    fs.pipe_file(f"{root}/1.0.0/{shard}", data[:len(data) // 2])
    failed = support.run_recordforge("verify", output, env=env, check=False)
    assert failed.returncode == 1 and shard in failed.stdout + failed.stderr
