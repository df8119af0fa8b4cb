"""Statistics of the kernel's partly checked columns against the Python path.

Plain CSV runs whose cells hold null texts, blank text, whitespace around a
number and values that fail, for optional, defaulted and required features
of every scalar type: on the native path every feature's values reach the
statistics column-wise ("scalars", or "masked" with which rows hold one;
only the values of rows the kernel declined are converted again), and the
statistics partials equal the Python path's, with one split and with two.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from recordforge.schemas.feature_config import parse_features
from recordforge.schemas.stats import StatisticsPlan, batch_statistics
from recordforge.transforms import native_rows
from recordforge.transforms.batch_converter import BatchConverter
from recordforge.transforms.readers.csv import CsvRunBatch, iter_csv

LABELS = ["cat", "dog"]
CELLS = {
    "int64": ["0", "-7", "42", "9", " 5", "x", "1.5"],
    "float": ["0.5", "-0.0", "1e3", "2", " 1.5", "nan", "x"],
    "string": ["a", "bb", "é", " c", "NA2"],
    "timestamp": ["2024-01-01T00:00:00Z", "1969-12-31", "2024-02-30", "2024-01-01T12:00:00"],
    "label": ["cat", "dog", "cow", " cat"],
}
DEFAULTS = {"int64": "3", "float": "0.25", "string": "none", "timestamp": "2020-01-01",
            "label": "dog"}


def _body(kind: str, how: str) -> dict:
    body = {"type": "int64", "vocabulary": LABELS} if kind == "label" else {"type": kind}
    if kind == "timestamp":
        body["unit"] = "s"
    body["null_values"] = ["", "NA"]
    if how == "optional":
        body["required"] = False
    elif how == "default":
        body["default"] = DEFAULTS[kind]
    return body


@st.composite
def tables(draw):
    """(specs, rows of cells): one to four features over columns c0..c3."""
    kinds = draw(st.lists(st.sampled_from(sorted(CELLS)), min_size=1, max_size=4))
    hows = [draw(st.sampled_from(["optional", "optional", "default", "required"])) for _ in kinds]
    specs = parse_features({f"f{at}": {**_body(kind, how), "from": f"c{at}"}
                            for at, (kind, how) in enumerate(zip(kinds, hows))}, nested=False)
    missing = st.sampled_from(["", "NA"])
    rows = draw(st.lists(st.tuples(*[st.one_of(st.sampled_from(CELLS[kind]), missing)
                                     for kind in kinds]), min_size=1, max_size=16))
    return specs, rows


def _converter(specs, native):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(native_rows, "kernels", lambda: native)
        return BatchConverter(specs, {}, None)


def _statistics(converter, specs, batch):
    """(each feature's form, the statistics with one split and with two)."""
    plan = StatisticsPlan.from_specs(specs, {})
    examples, _, _, values = converter.convert_observed_batch(batch, None, None, plan)
    forms = [values(spec.name)[0] for spec in specs]
    layouts = [(np.zeros(len(examples), dtype=np.int64), ["all"]),
               (np.arange(len(examples), dtype=np.int64) % 2, ["even", "odd"])]
    return forms, [[(where, stats.to_state()) for where, stats in
                    batch_statistics(plan, values, split_of, names)]
                   for split_of, names in layouts]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=tables())
def test_partly_checked_columns_give_the_python_statistics(native, tmp_path_factory, table):
    specs, rows = table
    path = tmp_path_factory.mktemp("csv") / "t.csv"
    width = len(rows[0])
    # (a row number last: no line is blank, which no plain run holds)
    path.write_text("\n".join([",".join(f"c{at}" for at in range(width)) + ",row"]
                              + [",".join(row) + f",{at}" for at, row in enumerate(rows)])
                    + "\n", encoding="utf-8")
    [batch] = [item for item in iter_csv(str(path), columns=True) if not isinstance(item, dict)]
    assert isinstance(batch, CsvRunBatch)
    forms, found = _statistics(_converter(specs, native), specs, batch)
    _, expected = _statistics(_converter(specs, None), specs, batch)
    assert repr(found) == repr(expected)  # (NaN equal to NaN, -0.0 apart from 0.0)
    assert "rows" not in forms, forms


def test_a_declined_value_alone_is_converted_again(native, tmp_path):
    """" 5" (whitespace: the kernel declines it, the row path strips it)
    and "NA" (left out) in one column: masked, the row path's 5 counted."""
    specs = parse_features({"n": {"type": "int64", "from": "c0", "null_values": ["NA"],
                                  "required": False}}, nested=False)
    path = tmp_path / "t.csv"
    path.write_text("c0\n1\nNA\n 5\n", encoding="utf-8")
    [batch] = list(iter_csv(str(path), columns=True))
    plan = StatisticsPlan.from_specs(specs, {})
    *_, values = _converter(specs, native).convert_observed_batch(batch, None, None, plan)
    form, (numbers, holds) = values("n")
    assert form == "masked" and holds.tolist() == [True, False, True]
    assert numbers[holds].tolist() == [1, 5]
