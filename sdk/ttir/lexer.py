"""Tokens of MLIR's textual form, as Triton prints TTIR."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import Day0Error


class TTIRSyntaxError(Day0Error):
    """The TTIR text could not be read; the message names the line."""


@dataclass(frozen=True)
class Token:
    kind: str   # value, sym, attr, block, str, num, id, punct, nl
    text: str
    line: int


_TOKEN = re.compile(r"""
    (?P<nl>\n)
  | (?P<ws>[ \t\r]+)
  | (?P<comment>//[^\n]*)
  | (?P<value>%[A-Za-z0-9_.$\-]+(?::\d+)?(?:\#\d+)?)
  | (?P<sym>@(?:"(?:[^"\\]|\\.)*"|[A-Za-z0-9_.$\-]+))
  | (?P<attr>[\#!][A-Za-z0-9_.$\-]+)
  | (?P<block>\^[A-Za-z0-9_.$\-]+)
  | (?P<str>"(?:[^"\\]|\\.)*")
  | (?P<num>-?0x[0-9A-Fa-f]+|-?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)
  | (?P<arrow>->)
  | (?P<id>[A-Za-z_][A-Za-z0-9_.$]*)
  | (?P<punct>[()\[\]{}<>,:=*?+|\-])
""", re.VERBOSE)


_BALANCED = (("tensor<", "type"), ("!tt.ptr<", "type"), ("!tt.tensordesc<", "type"), ("dense<", "dense"),
             ("array<", "array"), ("loc(", "loc"), ("fastmath<", "array"), ("overflow<", "array"))
_CLOSE = {"<": ">", "(": ")"}
_WORD = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.")


def _balanced_end(text: str, pos: int, opener: str) -> int:
    """Index just past the bracket that closes the `opener` at text[pos]."""
    close, depth, i, n = _CLOSE[opener], 0, pos, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif ch == opener:
            depth += 1
        elif ch == close and not (close == ">" and text[i - 1] == "-"):
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise TTIRSyntaxError(f"TTIR: unbalanced '{opener}' starting at offset {pos}")


def tokenize(text: str) -> list[Token]:
    """Split TTIR text into tokens. Types, dense/array attributes and locations are single tokens."""
    tokens: list[Token] = []
    line, pos, n = 1, 0, len(text)
    while pos < n:
        for prefix, kind in _BALANCED:
            if text.startswith(prefix, pos) and (pos == 0 or text[pos - 1] not in _WORD):
                end = _balanced_end(text, pos + len(prefix) - 1, prefix[-1])
                tok = text[pos:end]
                tokens.append(Token(kind, tok, line))
                line += tok.count("\n")
                pos = end
                break
        else:
            pos, line = _plain_token(text, pos, line, tokens)
    return tokens


def _plain_token(text: str, pos: int, line: int, tokens: list[Token]) -> tuple[int, int]:
    m = _TOKEN.match(text, pos)
    if m is None:
        raise TTIRSyntaxError(f"TTIR line {line}: unexpected character {text[pos]!r}")
    kind = m.lastgroup
    tok = m.group()
    if kind == "nl":
        tokens.append(Token("nl", tok, line))
        line += 1
    elif kind == "arrow":
        tokens.append(Token("punct", tok, line))
    elif kind not in ("ws", "comment"):
        tokens.append(Token(kind, tok, line))
    return m.end(), line
