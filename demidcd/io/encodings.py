"""Which text encodings a file's bytes are likely in, for the hint of a decoding error.

A file that is not valid in the encoding it is read with gets a hint naming the encodings that
decode it cleanly *and* plausibly, or none: ``latin-1`` decodes any bytes, so "pass --encoding
latin-1" for EUC-JP text would turn every Japanese character into two accented Latin letters
without any error. Each candidate must decode a sample of the bytes without error, give no
control, private-use or unassigned character, and give letters of one script laid out as that
script's text is:

* Japanese (``euc-jp``, ``shift_jis``): kana and kanji, with kana at least a tenth of them;
* Chinese (``gb18030``): hanzi, not only those where EUC-KR has its Hangul; Korean
  (``euc-kr``): Hangul syllables (at least half) and hanja; Russian and the like
  (``cp1251``): Cyrillic, mostly small letters. In these scripts a word is written in them
  throughout, so the non-ASCII letters are most of the letters of the words that hold them;
* Western European (``latin-1``, ``cp1252``): Latin letters with diacritics, which sit among
  ASCII letters (``España``): under half of the letters of the words that hold them. Read as
  ``latin-1``, multi-byte text (CJK, UTF-8) gives words of non-ASCII letters only.

Bytes that read as Japanese (kana) are not named Chinese or Korean too. A file that is valid
UTF-8 is named ``utf-8`` alone (when it was read with another encoding), one with a UTF-16
byte-order mark ``utf-16``.
"""

from __future__ import annotations

import codecs
import unicodedata

__all__ = ["likely_encodings", "encoding_hint"]

# (encoding, script), in the order they are named when several fit
CANDIDATES: tuple[tuple[str, str], ...] = (
    ("euc-jp", "japanese"), ("shift_jis", "japanese"), ("gb18030", "chinese"),
    ("euc-kr", "korean"), ("cp1251", "cyrillic"), ("latin-1", "latin"), ("cp1252", "latin"))
_SCRIPTS = dict(CANDIDATES)
_SAMPLE = 1 << 16  # bytes looked at, from the line of the error
_SHARE = 0.95  # share of the non-ASCII letters that must be of the candidate's script


def _script(c: str) -> str:
    """The script of a non-ASCII letter, as the candidates tell them apart."""
    o = ord(c)
    if 0x3040 <= o <= 0x30FF or 0x31F0 <= o <= 0x31FF or 0xFF66 <= o <= 0xFF9F:
        return "kana"
    if 0x4E00 <= o <= 0x9FFF or 0x3400 <= o <= 0x4DBF or 0xF900 <= o <= 0xFAFF \
            or 0x20000 <= o <= 0x2FFFF:
        return "han"
    if 0xAC00 <= o <= 0xD7AF:
        return "hangul"
    if 0xFF00 <= o <= 0xFFEF:
        return "fullwidth"  # Ａ, ｂ in CJK text: counted with no script
    if 0x0400 <= o <= 0x04FF:
        return "cyrillic"
    if 0x00C0 <= o <= 0x024F or 0x1E00 <= o <= 0x1EFF:
        return "latin"
    return "other"


def _plausible(text: str, script: str) -> bool:
    """Whether ``text`` (a clean decoding) reads as text in ``script`` (module docstring)."""
    counts: dict[str, int] = {}
    in_words = non_ascii_in_words = camel = small = 0
    for word in text.split():
        if word.isascii():
            continue
        letters, lower = 0, False
        for c in word:
            if c.isascii():
                letters += c.isalpha()
                lower = c.islower()
                continue
            cat = unicodedata.category(c)
            if cat[0] == "C":  # control, private use, unassigned, surrogate
                return False
            if cat[0] == "L":
                letters += 1
                non_ascii_in_words += 1
                kind = _script(c)
                counts[kind] = counts.get(kind, 0) + 1
                camel += lower and cat == "Lu"
                small += cat == "Ll"
            lower = cat == "Ll"
        in_words += letters
    counts.pop("fullwidth", None)
    n = sum(counts.values())
    if n == 0:
        return False
    mostly_non_ascii = non_ascii_in_words >= 0.5 * in_words
    kana, han, hangul = counts.get("kana", 0), counts.get("han", 0), counts.get("hangul", 0)
    if script == "japanese":
        return kana + han >= _SHARE * n and kana >= 0.1 * n and mostly_non_ascii
    if script == "chinese":
        return han >= _SHARE * n and mostly_non_ascii and _not_korean(text, han)
    if script == "korean":
        return hangul + han >= _SHARE * n and hangul >= 0.5 * n and mostly_non_ascii
    if script == "cyrillic":  # mostly small letters, few capitals after one (``ЦРОД``,
        # ``пРИвЕТ``: CJK bytes read as cp1251)
        return counts.get(script, 0) >= _SHARE * n and mostly_non_ascii \
            and small >= 0.5 * n and camel <= 0.05 * n
    return counts.get(script, 0) >= _SHARE * n and not mostly_non_ascii and camel <= 0.05 * n


def _not_korean(text: str, han: int) -> bool:
    """Whether hanzi read as gb18030 are not Korean EUC-KR bytes: EUC-KR puts the Hangul
    syllables at lead bytes B0-C8, where GB2312 has the hanzi of pinyin a to ru, so Korean
    read as gb18030 has hardly any of the others (lead C9-F7: 是 我 中 这 在 …), which are
    common in Chinese text."""
    if han < 20:
        return True  # too few to tell
    later = sum(1 for c in text if _script(c) == "han" and c.encode("gb18030")[0] >= 0xC9)
    return later >= 0.1 * han


def _sample(data: bytes, start: int) -> tuple[bytes, bool]:
    """(up to :data:`_SAMPLE` bytes of ``data`` from the line holding byte ``start``, whether
    they end where a character can end: at the end of ``data`` or of a line)."""
    first = data.rfind(b"\n", 0, start) + 1
    sample = data[first:first + _SAMPLE]
    if first + len(sample) == len(data):
        return sample, True
    end = sample.rfind(b"\n")
    return (sample[:end + 1], True) if end >= 0 else (sample, False)


def likely_encodings(data: bytes, tried: str = "utf-8", start: int = 0) -> list[str]:
    """The encodings ``data`` is likely in, besides ``tried`` (module docstring), looking at
    the bytes from the line of byte ``start`` on (where ``tried`` failed); [] when none fits."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return ["utf-16"]
    tried = _name(tried)
    sample, whole = _sample(data, start)
    found: list[str] = []
    if tried != "utf-8" and not sample.isascii() and _decode(sample, "utf-8", whole):
        return ["utf-8"]
    for encoding, script in CANDIDATES:
        if _name(encoding) == tried or (encoding == "cp1252" and "latin-1" in found):
            continue  # cp1252 reads as latin-1 does where latin-1 fits
        if script != "japanese" and found and _SCRIPTS[found[0]] == "japanese":
            continue  # Japanese that reads as such (kana) is not Chinese or Korean by chance
        text = _decode(sample, encoding, whole)
        if text is not None and _plausible(text, script):
            found.append(encoding)
    return found


def _decode(sample: bytes, encoding: str, whole: bool) -> str | None:
    """``sample`` as ``encoding`` text (a character cut at its end is left out unless
    ``whole``), or None when it is not valid ``encoding``."""
    try:
        return codecs.getincrementaldecoder(encoding)().decode(sample, final=whole)
    except UnicodeDecodeError:
        return None


def encoding_hint(data: bytes, tried: str, start: int = 0) -> str:
    """What to do about bytes that are not valid ``tried`` text: pass the encoding that fits
    (:func:`likely_encodings`), one of those that fit, or the file's own."""
    found = likely_encodings(data, tried, start)
    if len(found) == 1:
        return f"it reads cleanly as {found[0]}: pass --encoding {found[0]}"
    if found:
        return (f"it reads cleanly as {' or '.join(found)}: pass --encoding with the one it "
                "is in")
    return "pass --encoding with the encoding it is in"


def _name(encoding: str) -> str:
    """The codec's canonical name, or ``encoding`` when Python does not know it."""
    try:
        return codecs.lookup(encoding).name
    except LookupError:
        return encoding
