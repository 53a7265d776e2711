"""Text encodings: evaluate and predict read (and write) in the model's encoding unless
--encoding says otherwise; a file that is not valid in its encoding gets a hint naming only the
encodings that read it cleanly and plausibly (never latin-1 for CJK bytes); valid UTF-8 read as
latin-1 is said on its own line (issue 45, items 1, 2 and 7)."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from demidcd.cli import main
from demidcd.io.encodings import likely_encodings

NAMES = {"España": "B-LOC", "Málaga": "B-LOC", "José": "B-PER", "Núñez": "I-PER"}
OTHERS = ["el", "de", "año", "niño", "y", "la", "está"]


def _ner_text(n: int = 60, seed: int = 0) -> str:
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        for _ in range(rng.randint(3, 7)):
            w = rng.choice([*NAMES, *OTHERS])
            lines.append(f"{w} N {NAMES.get(w, 'O')}")
        lines.append("")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def latin(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(a Latin-1 NER file, its UTF-8 copy, a model trained on the former with --encoding
    latin-1)."""
    d = tmp_path_factory.mktemp("latin")
    text = _ner_text()
    l1, u8 = d / "esp.l1", d / "esp.u8"
    l1.write_bytes(text.encode("latin-1"))
    u8.write_bytes(text.encode("utf-8"))
    m = d / "ner.npz"
    assert main(["train", "--task", "ner", "--train", str(l1), "--feature-columns", "2",
                 "--encoding", "latin-1", "--threads", "1", "--max-epochs", "20",
                 "--model", str(m), "--quiet"]) == 0
    return l1, u8, m


def test_evaluate_and_predict_read_and_write_in_the_models_encoding(latin, tmp_path, cli):
    l1, u8, m = latin
    code, out, err = cli("evaluate", "--model", m, "--data", l1)
    assert code == 0 and err == "", err
    assert float(re.search(r"F1: ([\d.]+)", out).group(1)) > 90, out
    out_file = tmp_path / "ner.out"
    code, _, err = cli("predict", "--model", m, "--data", l1, "--out", out_file, "--threads", "1")
    assert code == 0 and err == "", err
    raw = out_file.read_bytes()
    with pytest.raises(UnicodeDecodeError):
        raw.decode("utf-8")  # written in the model's encoding, as read
    rows = [ln.split() for ln in raw.decode("latin-1").splitlines() if ln]
    assert [r[:3] for r in rows] == [ln.split() for ln in l1.read_text("latin-1").splitlines()
                                     if ln]
    assert all(r[3] == NAMES.get(r[0], "O") for r in rows)


def test_an_encoding_given_overrides_the_models(latin, tmp_path, cli):
    l1, u8, m = latin
    code, _, err = cli("evaluate", "--model", m, "--data", l1, "--encoding", "utf-8")
    assert code == 2 and f"{l1}:1: not valid utf-8 text" in err, err  # read as asked
    code, out, err = cli("evaluate", "--model", m, "--data", u8, "--encoding", "utf-8")
    assert code == 0 and "F1" in out, err
    assert "trained on text read as iso8859-1, --encoding utf-8 differs" in err
    out_file = tmp_path / "u8.out"
    code, _, err = cli("predict", "--model", m, "--data", u8, "--encoding", "utf-8",
                       "--out", out_file, "--threads", "1")
    assert code == 0 and "España" in out_file.read_bytes().decode("utf-8"), err


@pytest.mark.parametrize("command", ["evaluate", "predict"])
def test_help_says_the_encoding_is_the_models(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert re.search(r"--encoding ENCODING [^-]*\(default: the model's\)", text), text


def test_a_utf8_copy_read_as_latin1_scores_as_trained_and_says_so(tmp_path, cli):
    """Trained with --encoding latin-1 on a UTF-8 file (the README's NER command on a UTF-8
    copy): evaluate reads it as the model did, so the score is the trained one, and both
    commands say on a line of its own that the file is UTF-8 read as latin-1. Words that
    differ only by their accented letter carry the labels, so reading the file otherwise
    than in training loses them."""
    rng = random.Random(1)
    tags = {"né": "A", "nè": "B", "nê": "C"}
    text = "".join("".join(f"{w} {tags[w]}\n" for w in rng.choices(list(tags), k=5)) + "\n"
                   for _ in range(40))
    u8 = tmp_path / "u8.txt"
    u8.write_bytes(text.encode("utf-8"))
    m = tmp_path / "m.npz"
    code, _, err = cli("train", "--train", u8, "--encoding", "latin-1", "--threads", "1",
                       "--max-epochs", "20", "--min-count", "1", "--model", m)
    assert code == 0
    said = [ln for ln in err.splitlines() if "is valid UTF-8 but is read as latin-1" in ln]
    assert len(said) == 1 and said[0].startswith(f"demidcd: warning: {u8}:1: "), err
    assert "train and read it as utf-8" in said[0]
    code, out, err = cli("evaluate", "--model", m, "--data", u8)
    assert code == 0 and "accuracy: 100.00%" in out, (out, err)
    assert f"{u8}:1: the file is valid UTF-8 but is read as iso8859-1" in err


# ------------------------------------------------------------------ hints of a decoding error
JAPANESE = "東京都に住んでいる田中さんは毎日コーヒーを飲みます 日本語のテキストです"
SAMPLES = [
    (JAPANESE, "euc-jp", ["euc-jp"]),
    (JAPANESE, "shift_jis", ["shift_jis"]),
    ("我们是中国人民大学的学生 今天天气很好 北京是中华人民共和国的首都", "gb18030", ["gb18030"]),
    ("대한민국의 수도는 서울입니다 오늘은 날씨가 좋습니다 한국어 텍스트입니다", "euc-kr",
     ["euc-kr"]),
    ("Москва является столицей Российской Федерации Сегодня хорошая погода", "cp1251",
     ["cp1251"]),
    ("Die Größe der Straße in München ist schön Übermäßig viele Bäume", "latin-1", ["latin-1"]),
    ("“Ça va très bien” dit l’élève à l’école", "cp1252", ["cp1252"]),
]


@pytest.mark.parametrize(("text", "encoding", "expected"), SAMPLES,
                         ids=[s[1] for s in SAMPLES])
def test_likely_encodings_name_the_right_one_only(text, encoding, expected):
    data = ("\n".join(f"{w} X" for w in text.split()) + "\n").encode(encoding)
    assert likely_encodings(data, "utf-8") == expected


def test_likely_encodings_of_other_bytes():
    assert likely_encodings("España año\n".encode(), "euc-jp") == ["utf-8"]
    assert likely_encodings("a X\n".encode("utf-16"), "utf-8") == ["utf-16"]
    rng = random.Random(0)
    noise = bytes(rng.randrange(128, 256) for _ in range(4000))
    assert likely_encodings(noise, "utf-8") == []
    # the bytes from the line of the error on: a late bad line is looked at
    late = b"abc X\n" * 20000 + "Straße X\n".encode("latin-1")
    assert likely_encodings(late, "utf-8", len(late) - 5) == ["latin-1"]


def test_euc_jp_without_encoding_is_not_advised_latin1(tmp_path, cli):
    s = "".join(f"{w}\tX\n" for w in ["日本語", "の", "テキスト", "です"]) + "\n"
    ja = tmp_path / "ja.txt"
    ja.write_bytes((s * 50).encode("euc-jp"))
    code, _, err = cli("train", "--train", ja, "--format", "columns", "--threads", "1",
                       "--time-limit", "5", "--model", tmp_path / "ja.npz")
    assert code == 2 and err.count("\n") == 1, err
    assert f"{ja}:1: not valid utf-8 text; it reads cleanly as euc-jp: pass --encoding " \
           "euc-jp" in err
    assert "latin" not in err and not (tmp_path / "ja.npz").exists()
