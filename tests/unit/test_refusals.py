"""Every file ``validate`` refuses is refused in one line naming it (and the
field), exit status 2, nothing written -- the table of ``tests/refusal_cases.py``,
which ``tests/integration/test_refusals.py`` runs through ``fabric-emu run``
too. The reader refuses what would hang or exhaust it within a second, and
its bounds (size, depth, values) are far above what real files hold."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from emulator.errors import ConfigError
from emulator.schema import reading
from emulator.schema.reading import MAX_CONFIG_BYTES_ENV, read_yaml
from tests.conftest import REPO
from tests.refusal_cases import CASES, EXP, FLOW, HEAD, cli, listing, write_case


def test_validate_refuses_each_file_in_one_line(tmp_path):
    """One ``validate`` of every bad file at once (``--set`` cases alone):
    a line each, naming it; exit 2; nothing written."""
    work = tmp_path / "work"
    work.mkdir()
    batches: dict[tuple, list[str]] = {}
    for case, (files, extra, _, _) in CASES.items():
        d = tmp_path / case
        d.mkdir()
        write_case(d, files)
        batches.setdefault(tuple(extra), []).append(case)
    before = listing(tmp_path)
    for extra, cases in batches.items():
        res, took = cli(["validate", *[str(tmp_path / c / "exp.yaml") for c in cases], *extra],
                         work, tmp_path / "cache")
        assert res.returncode == 2, (took, res.stdout[-500:], res.stderr[-2000:])
        lines = res.stderr.strip().splitlines()
        assert len(lines) == len(cases), res.stderr[-3000:]
        for case, line in zip(cases, lines):
            assert line.startswith("fabric-emu: ") and len(line) < 400, line
            for w in CASES[case][2]:
                assert w in line, (case, line)
            if extra == ():
                assert f"/{case}/" in line, (case, line)
    assert listing(tmp_path) == before


def _read_in_a_thread(path: Path, timeout_s: float) -> tuple[BaseException | None, float]:
    """read_yaml(path)'s exception and the CPU seconds it took (its thread's:
    what the reader spends, whatever else loads the machine); a read that
    does not return within ``timeout_s`` of wall time fails the test
    instead of hanging it."""
    out: list = []

    def read():
        t0 = time.thread_time()
        try:
            read_yaml(path, "experiment file")
            out.append((None, time.thread_time() - t0))
        except BaseException as e:       # noqa: BLE001 (handed to the test)
            out.append((e, time.thread_time() - t0))

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(timeout_s)
    assert out, f"reading {path} did not return within {timeout_s} s"
    return out[0]


# (/dev/zero and /dev/urandom are read only in the subprocesses above, whose memory is bounded)
@pytest.mark.parametrize("case", sorted(c for c, v in CASES.items() if v[3] and not v[1]
                                        and "dev-" not in c and "topology" not in c))
def test_the_reader_refuses_within_a_second(tmp_path, case):
    write_case(tmp_path, CASES[case][0])
    err, took_s = _read_in_a_thread(tmp_path / "exp.yaml", 10)
    assert isinstance(err, ConfigError), err
    assert took_s < 1.0, f"{case}: refused after {took_s:.2f} s"


def test_the_size_limit_is_documented_and_overridable(tmp_path, monkeypatch):
    big = tmp_path / "exp.yaml"
    big.write_text(EXP + "#" * (2 << 20) + "\n")            # 2 MiB of comment: valid YAML
    with pytest.raises(ConfigError, match=f"more than the limit of 1,048,576 .*{MAX_CONFIG_BYTES_ENV}"):
        read_yaml(big, "experiment file")
    monkeypatch.setenv(MAX_CONFIG_BYTES_ENV, str(4 << 20))
    assert read_yaml(big, "experiment file")["name"] == "bad"
    monkeypatch.setenv(MAX_CONFIG_BYTES_ENV, "lots")
    with pytest.raises(ConfigError, match=f"^{MAX_CONFIG_BYTES_ENV}: must be a whole number"):
        read_yaml(big, "experiment file")
    assert MAX_CONFIG_BYTES_ENV in (REPO / "README.md").read_text()


def test_a_file_at_the_bounds_loads(tmp_path):
    """Bounds far above real files: 64 levels and 50,000 values still load,
    and as fast as the refusals (the flows of 7,000 listed flows)."""
    deep = tmp_path / "deep.yaml"
    deep.write_text("x: " + "[" * 63 + "]" * 63 + "\n")      # the mapping + 63 lists = 64 levels
    assert read_yaml(deep, "f")["x"] is not None
    many = tmp_path / "many.yaml"
    n = (reading.MAX_YAML_VALUES - 7) // 7                  # 7 values a flow, 7 around them
    many.write_text(HEAD + "traffic:\n" + FLOW * n)
    err, took_s = _read_in_a_thread(many, 10)
    assert err is None and took_s < 1.0, (err, took_s)
    many.write_text(HEAD + "traffic:\n" + FLOW * (n + 1))
    with pytest.raises(ConfigError, match="more than 50,000 values"):
        read_yaml(many, "f")


def test_aliases_count_and_recursion_is_refused(tmp_path):
    p = tmp_path / "a.yaml"
    p.write_text("a: &x {b: 1, c: [1, 2]}\nd: *x\ne: *x\n")
    data = read_yaml(p, "f")
    assert data["d"] == data["e"] == {"b": 1, "c": [1, 2]}
    p.write_text("a: &x [1, *x]\n")
    with pytest.raises(ConfigError, match=r"line 1: alias \*x is inside its own anchor"):
        read_yaml(p, "f")
    p.write_text("a: &x 1\nb: &x 2\n")
    with pytest.raises(ConfigError, match=r"line 2: anchor &x is defined twice \(first on line 1\)"):
        read_yaml(p, "f")
    p.write_text("a: *nope\n")
    with pytest.raises(ConfigError, match="undefined alias 'nope'"):
        read_yaml(p, "f")
