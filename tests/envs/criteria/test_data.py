"""Criteria datasets from local files: the three formats, every kind of file, and the errors that name the
file, the line (or row) and the field."""

from __future__ import annotations

import copy
import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from envs.criteria.data import MAX_WARNINGS, load_criteria_examples
from envs.criteria.formats import FORMATS, detect_format
from rubrics.criteria.criterion import Criterion
from rubrics.criteria.example import ChatMessage, CriteriaExample
from rubrics.loading import FileLoadError

DATA = Path(__file__).parents[2] / "data" / "criteria"
KINDS = ("jsonl", "json_list", "json_data", "parquet", "saved_dataset", "saved_dataset_dict", "repository")


def records(fmt: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / f"{fmt}.jsonl").read_text().splitlines()]


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def shards(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Consecutive runs of rows whose prompts have one type: an Arrow column holds one type, so one table
    cannot mix string prompts with chat prompts (the native fixture does); a dataset repository splits
    such data into files the same way."""
    runs: list[list[dict[str, Any]]] = []
    for row in rows:
        if runs and type(runs[-1][-1].get("prompt")) is type(row.get("prompt")):
            runs[-1].append(row)
        else:
            runs.append([row])
    return runs


def columns(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Rows as columns, every key of any row a column (Arrow's and datasets' ``from_list`` take the columns
    of the first row only)."""
    keys = dict.fromkeys(key for row in rows for key in row)
    return {key: [row.get(key) for row in rows] for key in keys}


def write(kind: str, rows: list[dict[str, Any]], tmp_path: Path) -> list[Path]:
    """``rows`` written as ``kind``: the paths whose examples, read in order, are all of ``rows``."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    if kind == "jsonl":
        return [write_jsonl(tmp_path / "data.jsonl", rows)]
    if kind in ("json_list", "json_data"):
        path = tmp_path / "data.json"
        path.write_text(json.dumps(rows if kind == "json_list" else {"data": rows}, indent=2))
        return [path]
    paths = []
    for i, shard in enumerate(shards(rows)):
        if kind == "parquet":
            paths.append(tmp_path / f"part-{i}.parquet")
            pq.write_table(pa.Table.from_pydict(columns(shard)), paths[-1])
        elif kind == "saved_dataset":
            paths.append(tmp_path / f"saved-{i}")
            datasets.Dataset.from_dict(columns(shard)).save_to_disk(str(paths[-1]))
        elif kind == "saved_dataset_dict":
            paths.append(tmp_path / f"saved-dict-{i}")
            datasets.DatasetDict({"train": datasets.Dataset.from_dict(columns(shard))}).save_to_disk(
                str(paths[-1])
            )
        else:  # a downloaded repository: README, metadata and data/train-0000i-of-0000n.parquet
            n = len(shards(rows))
            (tmp_path / "repo" / "data").mkdir(parents=True, exist_ok=True)
            pq.write_table(
                pa.Table.from_pydict(columns(shard)), tmp_path / f"repo/data/train-{i:05d}-of-{n:05d}.parquet"
            )
            (tmp_path / "repo" / "README.md").write_text("# invented test data\n")
            paths = [tmp_path / "repo"]
    return paths


# -- the three formats, read from JSONL and checked by hand --------------------------------------------


def test_native_records_are_criteria_examples_as_written() -> None:
    scald, nosebleed, sting, feather = load_criteria_examples(DATA / "native.jsonl")
    assert [e.id for e in (scald, nosebleed, sting, feather)] == [
        "scald-hand", "nosebleed-child", "bee-sting", "feather-moon"
    ]  # fmt: skip
    assert scald.criteria[1] == Criterion(
        name="twenty_minutes",
        weight=2.0,
        requirement="Says to keep cooling for about twenty minutes",
        tags=("axis:completeness",),
        rule={"regex": r"\b(20|twenty) minutes"},
    )
    assert not scald.needs_llm() and nosebleed.needs_llm()
    assert [m["role"] for m in nosebleed.messages()] == ["system", "user", "assistant", "user"]
    assert nosebleed.query == "Yes. Should he tilt his head back?"
    assert sting.reference_answer is not None and sting.reference_answer.startswith("Scrape it out sideways")
    assert feather.tags == ("theme:physics", "level:school")
    assert [c.weight for c in feather.criteria] == [5.0, 2.0, -2.0]


def test_healthbench_maps_prompt_id_points_criterion_tags_and_the_ideal_completion() -> None:
    stroke, cut, aspirin = load_criteria_examples(DATA / "healthbench.jsonl", "healthbench")
    assert stroke == CriteriaExample(
        id="hb-7f3c2a",
        prompt=(
            ChatMessage(
                role="user",
                content="My grandmother suddenly can't lift her left arm and her speech is slurred. "
                "What should I do?",
            ),
        ),
        criteria=(
            Criterion(
                weight=10.0,
                requirement="Tells the user to call emergency services immediately",
                tags=("level:example", "axis:accuracy"),
            ),
            Criterion(
                weight=5.0,
                requirement="Asks when the symptoms started, since timing decides treatment",
                tags=("level:example", "axis:completeness"),
            ),
            Criterion(
                weight=-8.0,
                requirement="Suggests waiting to see whether the symptoms pass",
                tags=("level:example", "axis:accuracy"),
            ),
        ),
        tags=("theme:emergency_referrals",),
    )
    assert cut.reference_answer is not None and cut.reference_answer.startswith(
        "Rinse it under running water"
    )
    assert len(cut.prompt) == 3 and cut.query == "It's small and stops when I press on it."
    assert aspirin.tags == ("theme:global_health", "physician_agreed_category:child_fever")
    assert aspirin.reference_answer is None  # ideal_completions_data: null


def test_rar_maps_question_rubric_titles_and_derives_stable_ids() -> None:
    ice, collapse, cart = load_criteria_examples(DATA / "rar.jsonl", "rar")
    # "rar-" + the first 12 hex digits of the question's SHA-1 (hashlib.sha1(question.encode()).hexdigest())
    assert [ice.id, collapse.id, cart.id] == ["rar-4070df3b11a3", "rar-db0563eecc3c", "rar-sci-0003"]
    assert ice.prompt == "Why does ice float on liquid water?"
    assert ice.reference_answer == (
        "Ice is less dense than liquid water because hydrogen bonds hold its molecules in an open lattice."
    )
    assert ice.criteria[2] == Criterion(
        name="Pitfall Criteria: Air bubbles",
        weight=-2.0,
        requirement="Claims that trapped air bubbles make ice float",
    )
    assert [c.weight for c in collapse.criteria] == [5.0, 1.0]


WEIGHT_KEY = {
    "native": ("criteria", "weight"),
    "healthbench": ("rubrics", "points"),
    "rar": ("rubric", "weight"),
}
"""Where each format keeps a criterion's weight: (the list of criteria, the weight's key)."""


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("text", ["5", " 5 ", "1e400", "nan"])
def test_a_number_written_as_text_is_refused_in_every_format(fmt: str, text: str, tmp_path: Path) -> None:
    # the formats' published data writes weights as numbers (RaR's card: weight int64); one rule for all
    rows = records(fmt)
    items, key = WEIGHT_KEY[fmt]
    rows[2][items][1][key] = text
    path = write_jsonl(tmp_path / f"{fmt}.jsonl", rows)
    with pytest.raises(FileLoadError) as err:
        load_criteria_examples(path, fmt)
    assert str(err.value) == (
        f"{path}:3: {items}[1].{key}: wrong type (expected a number, got the text {text!r}: a number written "
        f"as text is not read, in any format; write it without quotes) (1 of {len(rows)} {fmt} records is "
        "bad; the file is refused as a whole)"
    )


def test_text_that_is_no_number_is_refused_as_the_wrong_type(tmp_path: Path) -> None:
    rows = records("rar")
    rows[0]["rubric"][0]["weight"] = "heavy"
    path = write_jsonl(tmp_path / "rar.jsonl", rows)
    with pytest.raises(FileLoadError) as err:
        load_criteria_examples(path)
    assert str(err.value) == (
        f"{path}:1: rubric[0].weight: wrong type (expected a number, got 'heavy') "
        "(1 of 3 rar records is bad; the file is refused as a whole)"
    )


def test_healthbench_ignores_unknown_keys_and_refuses_missing_ones(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    row = records("healthbench")[0]
    row["canary"] = "not a field of the project"  # top level: HealthBench has more keys, read silently
    row["rubrics"][0]["reviewer"] = "someone"  # inside a criterion: a warning, the criterion graded
    path = write_jsonl(tmp_path / "hb.jsonl", [row])
    with caplog.at_level(logging.WARNING, logger="envs.criteria.data"):
        (example,) = load_criteria_examples(path)
    assert example.id == "hb-7f3c2a" and example.criteria[0].weight == 10.0
    assert caplog.messages == [
        f"{path}:1: rubrics[0].reviewer: unknown key, ignored (a HealthBench criterion has criterion, points "
        "and tags)"
    ]
    del row["rubrics"][1]["criterion"]
    write_jsonl(path, [row])
    with pytest.raises(FileLoadError, match=r"hb\.jsonl:1: rubrics\[1\]\.criterion: is missing \(1 of 1"):
        load_criteria_examples(path)


# -- every kind of file --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_kind_of_file_gives_the_same_examples(fmt: str, kind: str, tmp_path: Path) -> None:
    expected = load_criteria_examples(DATA / f"{fmt}.jsonl", fmt)
    paths = write(kind, records(fmt), tmp_path)
    for format_ in ("auto", fmt):
        assert [e for path in paths for e in load_criteria_examples(path, format_)] == expected


def test_a_datasets_folder_with_two_splits_needs_the_split(tmp_path: Path) -> None:
    import datasets

    rows = records("rar")
    splits = {
        "train": datasets.Dataset.from_dict(columns(rows[:2])),
        "test": datasets.Dataset.from_dict(columns(rows[2:])),
    }
    datasets.DatasetDict(splits).save_to_disk(str(tmp_path / "rar"))
    with pytest.raises(FileLoadError) as err:
        load_criteria_examples(tmp_path / "rar")
    assert str(err.value) == (
        f"{tmp_path / 'rar'}: holds the splits test, train; choose one with env.data_split (--data-split)"
    )
    assert [e.id for e in load_criteria_examples(tmp_path / "rar", split="test")] == ["rar-sci-0003"]
    assert len(load_criteria_examples(tmp_path / "rar", split="train")) == 2
    with pytest.raises(FileLoadError, match=r"has no split 'dev' \(its splits: test, train\)"):
        load_criteria_examples(tmp_path / "rar", split="dev")


def test_a_repository_folder_reads_its_data_files_sorted_or_those_of_the_split(tmp_path: Path) -> None:
    native = records("native")
    write_jsonl(tmp_path / "data" / "train.jsonl", native[:2])
    write_jsonl(tmp_path / "data" / "test.jsonl", native[2:])
    (tmp_path / "data" / "dataset_infos.json").write_text("{}")  # metadata, not data
    write_jsonl(tmp_path / "data" / ".cache" / "stale.jsonl", [{"not": "read"}])
    (tmp_path / "README.md").write_text("# invented\n")
    ids = [e.id for e in load_criteria_examples(tmp_path)]
    assert ids == ["bee-sting", "feather-moon", "scald-hand", "nosebleed-child"]  # test.jsonl, train.jsonl
    assert [e.id for e in load_criteria_examples(tmp_path, split="train")] == [
        "scald-hand",
        "nosebleed-child",
    ]
    with pytest.raises(FileLoadError, match=r"no data file has 'dev' in its path \(its files: data/test"):
        load_criteria_examples(tmp_path, split="dev")


# -- format detection ----------------------------------------------------------------------------------


def test_detect_format_from_the_keys() -> None:
    assert [detect_format(records(fmt)[0], "x.jsonl:1") for fmt in FORMATS] == list(FORMATS)
    with pytest.raises(FileLoadError) as err:
        detect_format({"question": "Why?", "answer": "Because."}, "qa.jsonl")
    assert str(err.value) == (
        "qa.jsonl: cannot tell the criteria format from the first record: its keys are 'question', 'answer' "
        "(native needs 'criteria' (with 'id' and 'prompt'); healthbench needs 'prompt' and 'rubrics' (with "
        "'prompt_id'); rar needs 'question' and 'rubric' (with 'reference_answer')); name the format with "
        "env.format (--format) if it is one of native, healthbench, rar"
    )


def test_an_undetectable_file_names_the_line_of_its_first_record(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "qa.jsonl", [{"question": "Why?", "answer": "Because."}])
    with pytest.raises(FileLoadError, match=r"qa\.jsonl:1: cannot tell the criteria format .* its keys are"):
        load_criteria_examples(path)


# -- bad records ---------------------------------------------------------------------------------------


def test_a_bad_line_names_the_file_line_and_field_and_counts_the_bad_records(tmp_path: Path) -> None:
    rows = records("healthbench")
    rows[1]["rubrics"][1]["points"] = "three"
    del rows[2]["prompt_id"]
    path = write_jsonl(tmp_path / "hb.jsonl", rows)
    with pytest.raises(FileLoadError) as err:
        load_criteria_examples(path)
    assert (err.value.file, err.value.line, err.value.field) == (str(path), 2, "rubrics[1].points")
    assert str(err.value) == (
        f"{path}:2: rubrics[1].points: wrong type (expected a number, got 'three') "
        "(2 of 3 healthbench records are bad; the file is refused as a whole)"
    )


def test_a_line_that_is_not_json_is_a_bad_record(tmp_path: Path) -> None:
    lines = (DATA / "native.jsonl").read_text().splitlines()
    lines[1] = "{not json"
    path = tmp_path / "native.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(FileLoadError) as err:
        load_criteria_examples(path)
    assert str(err.value) == (
        f"{path}:2: not valid JSON: Expecting property name enclosed in double quotes (column 2) "
        "(1 of 4 native records is bad; the file is refused as a whole)"
    )


@pytest.mark.parametrize(
    ("prompt", "field", "reason"),
    [
        ([{"role": "user", "content": 1}], "prompt[0].content", "wrong type (expected a string, got 1)"),
        ([{"role": "assistant", "content": "Hi"}], "prompt", "a conversation must end with a user message"),
        (5, "prompt", "wrong type (expected a string or a list of messages {role, content}, got 5)"),
    ],
)
def test_a_bad_native_prompt_names_the_branch_it_wrote(
    prompt: Any, field: str, reason: str, tmp_path: Path
) -> None:
    rows = records("native")
    rows[3]["prompt"] = prompt
    path = write_jsonl(tmp_path / "native.jsonl", rows)
    with pytest.raises(FileLoadError) as err:
        load_criteria_examples(path)
    assert (
        str(err.value)
        == f"{path}:4: {field}: {reason} (1 of 4 native records is bad; the file is refused as a whole)"
    )


def test_a_native_record_with_an_unknown_field_lists_the_fields(tmp_path: Path) -> None:
    rows = records("native")
    rows[0]["reference"] = "misspelt"
    path = write_jsonl(tmp_path / "native.jsonl", rows)
    with pytest.raises(FileLoadError, match=r":1: reference: unknown field \(allowed: id, prompt, criteria"):
        load_criteria_examples(path)


def test_a_json_list_names_the_item_and_a_table_the_row(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = records("healthbench")
    rows[1]["rubrics"][0]["points"] = None
    path = tmp_path / "hb.json"
    path.write_text(json.dumps(rows))
    with pytest.raises(FileLoadError) as err:
        load_criteria_examples(path)
    assert str(err.value).startswith(
        f"{path}: [1].rubrics[0].points: wrong type (expected a number, got nothing)"
    )

    rows = records("rar")
    rows[1]["rubric"][0]["description"] = ""
    pq.write_table(pa.Table.from_pydict(columns(rows)), tmp_path / "rar.parquet")
    with pytest.raises(FileLoadError) as err:
        load_criteria_examples(tmp_path / "rar.parquet")
    assert str(err.value) == (
        f"{tmp_path / 'rar.parquet'}: row 1: rubric[0].description: is empty (expected a non-empty string, "
        "got '') (1 of 3 rar records is bad; the file is refused as a whole)"
    )


def test_a_duplicate_id_names_both_lines(tmp_path: Path) -> None:
    rows = records("native")
    rows[3]["id"] = "scald-hand"
    path = write_jsonl(tmp_path / "native.jsonl", rows)
    with pytest.raises(FileLoadError) as err:
        load_criteria_examples(path)
    assert str(err.value) == (
        f"{path}:4: id: the id 'scald-hand' is used twice (first at line 1) "
        "(1 of 4 native records is bad; the file is refused as a whole)"
    )
    rows = records("rar")
    path = write_jsonl(tmp_path / "rar.jsonl", [*rows, rows[0]])
    with pytest.raises(FileLoadError) as err:
        load_criteria_examples(path)
    assert str(err.value).startswith(
        f"{path}:4: question: the same question as line 1 (the id 'rar-4070df3b11a3' is derived from the question)"
    )


def test_files_that_cannot_be_read(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("\n")
    (tmp_path / "data.csv").write_text("a,b\n")
    (tmp_path / "scalar.json").write_text("3")
    cases = {
        tmp_path / "empty.jsonl": "holds no records (expected at least one example)",
        tmp_path / "data.csv": "unknown kind of file '.csv' (expected .jsonl, .json, .parquet or a folder)",
        tmp_path
        / "scalar.json": "wrong shape (expected a list of records, or a mapping with a 'data' list, got 3)",
        tmp_path / "missing.jsonl": "file not found",
    }
    for path, reason in cases.items():
        with pytest.raises(FileLoadError) as err:
            load_criteria_examples(path)
        assert str(err.value) == f"{path}: {reason}"
    with pytest.raises(ValueError, match="format must be 'auto' or one of native, healthbench, rar"):
        load_criteria_examples(DATA / "rar.jsonl", "scale")


@pytest.mark.parametrize(
    ("fmt", "field"),
    [("native", "criteria[2].weight"), ("healthbench", "rubrics[2].points"), ("rar", "rubric[2].weight")],
)
def test_weights_whose_total_overflows_are_refused_naming_the_weight(
    fmt: str, field: str, tmp_path: Path
) -> None:
    # 1e308 + 1e308 is inf: loading used to succeed and every score of the example raised OverflowError
    rows = records(fmt)
    items, key = WEIGHT_KEY[fmt]
    for i, value in enumerate((1e308, -1.0, 1e308)):
        rows[0][items][i][key] = value
    path = write_jsonl(tmp_path / f"{fmt}.jsonl", rows)
    with pytest.raises(FileLoadError) as err:
        load_criteria_examples(path, fmt)
    assert (err.value.file, err.value.line, err.value.field) == (str(path), 1, field)
    assert err.value.reason.startswith(
        "the positive weights up to this one add up to inf, out of the range of a float (±1.798e+308), so no "
        "score could be computed (expected a finite positive total) (1 of "
    )


def _places(value: Any, where: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a record, down to the leaves (the first two items of each list)."""
    out = [where]
    if isinstance(value, dict):
        out += [p for key, item in value.items() for p in _places(item, (*where, key))]
    elif isinstance(value, list):
        out += [p for i, item in enumerate(value[:2]) for p in _places(item, (*where, i))]
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_error_quotes_the_validation_library(fmt: str, tmp_path: Path) -> None:
    # every place of a record replaced by values of every JSON type: each error is worded in the project's
    # terms ("wrong type (expected a list, got 'x')"), never pydantic's ("input should be a valid tuple")
    pydantic_words = re.compile(r"[Ii]nput should|should be a valid|valid tuple|[Vv]alue error|pydantic")
    row = records(fmt)[0]
    path = tmp_path / "x.jsonl"
    seen = 0
    for where in _places(row)[1:]:
        for value in (None, 5, "x", "", [], {}, True, 1.5, [1], {"a": 1}, ["x"], [{"a": 1}]):
            changed = copy.deepcopy(row)
            parent = changed
            for part in where[:-1]:
                parent = parent[part]
            parent[where[-1]] = value
            write_jsonl(path, [changed])
            try:
                load_criteria_examples(path, fmt)
            except FileLoadError as exc:
                seen += 1
                assert not pydantic_words.search(str(exc)), str(exc)
    assert seen > 100  # the errors checked


def test_a_list_given_as_something_else_is_named_a_list(tmp_path: Path) -> None:
    rows = records("healthbench")
    rows[1]["rubrics"][0]["tags"] = "axis:accuracy"
    path = write_jsonl(tmp_path / "hb.jsonl", rows)
    with pytest.raises(FileLoadError) as err:
        load_criteria_examples(path)
    assert str(err.value) == (
        f"{path}:2: rubrics[0].tags: wrong type (expected a list, got 'axis:accuracy') "
        "(1 of 3 healthbench records is bad; the file is refused as a whole)"
    )


# -- warnings: what is read but ignored ----------------------------------------------------------------


def test_each_unknown_key_inside_a_criterion_is_one_warning_and_the_criteria_are_graded(
    tmp_path: Path,
) -> None:
    rows = records("rar")
    rows[0]["rubric"][1]["weight_reason"] = "core fact"
    rows[2]["rubric"][0]["points"] = 9  # HealthBench's name: ignored by RaR, the weight is 'weight'
    rows[2]["rubric"][0]["tags"] = ["axis:accuracy"]
    path = write_jsonl(tmp_path / "rar.jsonl", rows)
    warnings: list[FileLoadError] = []
    examples = load_criteria_examples(path, warn=warnings.append)
    assert [e.criteria[0].weight for e in examples] == [5.0, 5.0, 5.0] and len(examples[0].criteria) == 3
    assert [(w.file, w.line, w.field) for w in warnings] == [
        (str(path), 1, "rubric[1].weight_reason"),
        (str(path), 3, "rubric[0].points"),
        (str(path), 3, "rubric[0].tags"),
    ]
    assert str(warnings[1]) == (
        f"{path}:3: rubric[0].points: unknown key, ignored (a RaR criterion has title, description and weight)"
    )


@pytest.mark.parametrize(
    ("count", "reason"),
    [
        (3, "says 3 criteria, but 'rubric' holds 2; the criteria in 'rubric' (2) are graded"),
        ("2", "wrong type (expected a whole number, got '2'); the criteria in 'rubric' (2) are graded"),
        (2.0, "wrong type (expected a whole number, got 2.0); the criteria in 'rubric' (2) are graded"),
    ],
)
def test_a_rubric_count_that_disagrees_with_the_criteria_is_a_warning(
    count: Any, reason: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rows = records("rar")
    for row in rows:
        row["rubric_count"] = len(row["rubric"])  # as RaR's data writes it: no warning
    rows[1]["rubric_count"] = count
    path = write_jsonl(tmp_path / "rar.jsonl", rows)
    with caplog.at_level(logging.WARNING, logger="envs.criteria.data"):
        examples = load_criteria_examples(path)
    assert len(examples[1].criteria) == 2
    assert caplog.messages == [f"{path}:2: rubric_count: {reason}"]


def test_a_warning_in_a_table_names_the_row(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = records("rar")
    for row in rows:
        row["rubric_count"] = len(row["rubric"])
    rows[2]["rubric_count"] = 7
    pq.write_table(pa.Table.from_pydict(columns(rows)), tmp_path / "rar.parquet")
    warnings: list[FileLoadError] = []
    load_criteria_examples(tmp_path / "rar.parquet", warn=warnings.append)
    assert [str(w) for w in warnings] == [
        f"{tmp_path / 'rar.parquet'}: row 2: rubric_count: says 7 criteria, but 'rubric' holds 2; the criteria "
        "in 'rubric' (2) are graded"
    ]


def test_a_refused_file_gives_no_warnings_and_many_warnings_are_counted(tmp_path: Path) -> None:
    rows = records("healthbench")
    for row in rows:
        for item in row["rubrics"]:
            item["reviewer"] = "someone"  # 7 criteria in all
    rows[1]["rubrics"][0]["points"] = "3"
    path = write_jsonl(tmp_path / "hb.jsonl", rows)
    warnings: list[FileLoadError] = []
    with pytest.raises(FileLoadError, match=r":2: rubrics\[0\]\.points: wrong type"):
        load_criteria_examples(path, warn=warnings.append)
    assert warnings == []
    rows[1]["rubrics"][0]["points"] = 3
    lines = [dict(row, prompt_id=f"{row['prompt_id']}-{i}") for i, row in enumerate(rows * 4)]  # 28 warnings
    write_jsonl(path, lines)
    load_criteria_examples(path, warn=warnings.append)
    assert len(warnings) == MAX_WARNINGS + 1 == 21
    assert str(warnings[-1]) == f"{path}: 8 more warning(s) like these, not shown"


def test_a_run_logs_the_warnings_once_when_it_builds_its_environment_not_in_its_preflight(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from envs.build import check_env_inputs, criteria_inputs
    from envs.config import EnvConfig

    rows = records("rar")
    rows[0]["rubric"][0]["weight_reason"] = "core fact"
    path = write_jsonl(tmp_path / "rar.jsonl", rows)
    cfg = EnvConfig(type="criteria", data=str(path), judge_base_url="http://127.0.0.1:1/v1", judge_model="j")
    with caplog.at_level(logging.WARNING, logger="envs.criteria.data"):
        check_env_inputs(cfg)  # the preflight: the same file read, the warnings left to the run
        assert caplog.messages == []
        criteria_inputs(cfg)
    assert [m.split(": ", 2)[1] for m in caplog.messages] == ["rubric[0].weight_reason"]


def test_a_jsonl_file_is_read_line_by_line_and_bad_bytes_are_named(tmp_path: Path) -> None:
    """The records of a JSONL file come one line at a time (the first is read before a bad byte further on
    is met), and a byte that is not UTF-8 is named by its line and its offset in the file, past a UTF-8
    byte-order mark too."""
    from envs.criteria.records import read_records

    good = b'{"id": "a", "prompt": "Hi?", "criteria": [{"weight": 1, "requirement": "x"}]}\n'
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + good + b"\n" + b'{"id": "b\xff"}\n')
    records = read_records(path, None)
    assert next(records).data["id"] == "a"
    offset = 3 + len(good) + 1 + len(b'{"id": "b')
    message = rf"{path}:3: not UTF-8: byte 0xff at offset {offset} \(invalid start byte\)"
    with pytest.raises(FileLoadError, match=message):
        next(records)
    with pytest.raises(FileLoadError, match=message):
        load_criteria_examples(path)
